package instance_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// instanceBehindAPIProxy is lt.instance whose Kubernetes API traffic goes
// through a proxy the test can cut: the node losing the API server.
func (lt *leaseTest) instanceBehindAPIProxy(primaryPort int) (*instance, *proxy) {
	in := lt.instance(primaryPort)
	u, err := url.Parse(lt.env.Config.Host)
	if err != nil {
		lt.t.Fatal(err)
	}
	port := 0
	if _, err := fmt.Sscanf(u.Port(), "%d", &port); err != nil {
		lt.t.Fatalf("API server address %s: %v", lt.env.Config.Host, err)
	}
	api := newProxy(lt.t, port)
	path := filepath.Join(in.root, "kubeconfig")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		lt.t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", api.port())
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		lt.t.Fatal(err)
	}
	return in, api
}

// postmaster is the postgres process below the instance manager, 0 for none.
func (in *instance) postmaster() int {
	for pid, p := range procs() {
		if p.ppid == in.cmd.Process.Pid && p.comm == "postgres" && p.state != "Z" {
			return pid
		}
	}
	return 0
}

// ackWriter inserts a row every 20 ms on a new connection and records when
// each insert was acknowledged.
type ackWriter struct {
	mu   sync.Mutex
	acks []time.Time
	stop chan struct{}
	done chan struct{}
}

func (in *instance) startAckWriter(ctx context.Context, from int) *ackWriter {
	w := &ackWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for id := from; ; id++ {
			if err := in.execWithin(ctx, 300*time.Millisecond, fmt.Sprintf("INSERT INTO acks VALUES (%d)", id)); err == nil {
				w.mu.Lock()
				w.acks = append(w.acks, time.Now())
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *ackWriter) halt() []time.Time {
	close(w.stop)
	<-w.done
	return w.acks
}

// A primary whose postgres started again (a killed postmaster, a restart
// asked through the API) and whose node then loses the API server before
// that run's first renewal fences all the same, before the lease it last
// renewed runs out: past that the operator may promote another instance.
// No write is acknowledged after the lease's expiry.
func TestRestartedPrimaryFencesWithoutTheAPIServer(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	in, api := lt.instanceBehindAPIProxy(1)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")
	for _, r := range []struct {
		round   string
		restart func()
	}{
		{"a killed postmaster", func() { _ = syscall.Kill(in.postmaster(), syscall.SIGKILL) }},
		{"a restart asked", func() { post(t, in, instanceapi.PathRestart, apiToken, nil, nil) }},
	} {
		round, restart := r.round, r.restart
		old := in.postmaster()
		restart()
		// The new postmaster exists: its run read the lease already.
		deadline := time.Now().Add(30 * time.Second)
		for p := in.postmaster(); p == 0 || p == old; p = in.postmaster() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no new postmaster within 30 s", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
		api.partition()
		cut := time.Now()
		w := in.startAckWriter(ctx, 1000*len(round))
		expiry := lt.get().Spec.RenewTime.Add(instanceapi.LeaseDuration)
		t.Logf("%s: the API server cut; the lease expires in %s", round, time.Until(expiry).Round(time.Millisecond))
		// Gone twice in a row: a read of /proc can miss a process that runs.
		for giveUp, gone := expiry.Add(2*time.Second), 0; gone < 2 && time.Now().Before(giveUp); {
			if gone++; in.postmaster() != 0 {
				gone = 0
			}
			time.Sleep(20 * time.Millisecond)
		}
		fenced := time.Since(cut)
		// The writer goes on past the expiry, so a write acknowledged
		// after it is seen even if the loop above ended early.
		time.Sleep(time.Until(expiry.Add(200 * time.Millisecond)))
		acks := w.halt()
		var late []time.Time
		for _, a := range acks {
			if !a.Before(expiry) {
				late = append(late, a)
			}
		}
		if len(late) > 0 {
			t.Errorf("%s: %d writes acknowledged after the lease expired at %s (first %s)", round, len(late), expiry.Format(time.StampMilli), late[0].Format(time.StampMilli))
		}
		// Sampled again once the lease has expired: under load the first
		// loop can see a postmaster that is starting or restarting as
		// gone, and that is no fence.
		if in.postmaster() != 0 {
			if time.Sleep(20 * time.Millisecond); in.postmaster() != 0 {
				t.Fatalf("%s: postgres still runs %s after the API server was cut, past the lease's expiry", round, time.Since(cut).Round(time.Millisecond))
			}
		}
		t.Logf("%s: fenced %s after the API server was cut, %s before the lease expired; %d writes acknowledged meanwhile",
			round, fenced.Round(time.Millisecond), expiry.Sub(cut.Add(fenced)).Round(time.Millisecond), len(acks))
		api.heal()
		in.waitReady(60 * time.Second)
	}
}

// A primary whose server hangs (every postgres process stopped, as on a
// dead disk) stops renewing its lease and kills postgres before the lease
// can run out, then starts again and holds it. It runs with a longer term
// than the default (spec.ha.leaseDurationSeconds): it records that term
// at each renewal, and serves until that term, less the fence margin,
// runs out: not the default term's end.
func TestHungPrimaryStopsRenewing(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	const term = 12 * time.Second
	lt := newLeaseTest(t, "orders-0")
	in := lt.instance(1)
	in.extraFlags = append(in.extraFlags, instanceapi.Flag(instanceapi.FlagLeaseDuration, term.String()))
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	eventually(t, 5*time.Second, func() bool {
		l := lt.get()
		return l.Spec.RenewTime != nil && ptr.Deref(l.Spec.LeaseDurationSeconds, 0) == int32(term/time.Second)
	}, "the lease recording a 12 s term")
	server, frozenAt := in.freezeServer()
	// A scrape of the hung server costs its figures, in bounded time, and
	// never holds up the readiness probe.
	readyzTook := make(chan time.Duration, 1)
	go func() { start := time.Now(); in.readyz(); readyzTook <- time.Since(start) }()
	scraped, err := in.scrape()
	if err != nil {
		t.Fatalf("scraping the hung primary: %v", err)
	}
	if scrapeTook := time.Since(frozenAt); scrapeTook > 6*time.Second {
		t.Errorf("the scrape of the hung primary took %s", scrapeTook)
	}
	if up := scraped.get(t, "daytwo_postgres_up", ""); up != 0 {
		t.Errorf("daytwo_postgres_up = %v on a hung primary, want 0", up)
	}
	if took := <-readyzTook; took > 3*time.Second {
		t.Errorf("/readyz took %s while the scrape waited on the hung server", took)
	}
	// While frozen, the lease is not renewed; the manager kills postgres
	// before the last renewal expires.
	waitKilled(t, server, term)
	// The last renewal started at most a renewal period and the heartbeat's
	// deadline before the freeze, and the fence is due LeaseFenceMargin
	// before that renewal's term ends: under the default term, 6.5 s after
	// the freeze at the latest (6.07 s, measured with the term ignored).
	fenced := time.Since(frozenAt)
	t.Logf("frozen postgres killed %s after the freeze, under a %s term", fenced.Round(time.Millisecond), term)
	if fenced < instanceapi.LeaseDuration {
		t.Errorf("killed %s after the freeze: by the default term, not the %s recorded", fenced.Round(time.Millisecond), term)
	}
	if fenced >= term {
		t.Errorf("killed %s after the freeze, past the %s term", fenced.Round(time.Millisecond), term)
	}
	in.waitReady(90 * time.Second)
	if l := lt.get(); !l.Spec.RenewTime.After(frozenAt) {
		t.Fatal("the restarted primary does not renew its lease")
	}
}

// freezeServer stops every postgres process of in (SIGSTOP), as a dead
// disk would hang them, and says which and when.
func (in *instance) freezeServer() ([]int, time.Time) {
	pgid := in.postmaster()
	if pgid == 0 {
		in.t.Fatal("no postmaster below the instance manager")
	}
	// Every backend is a session of its own: stop each one.
	server := append(descendants(pgid, ""), pgid)
	frozenAt := time.Now()
	for _, pid := range server {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	return server, frozenAt
}

// waitKilled waits until every process of server is gone, within a lease
// of term past its heartbeat's deadline and a renewal.
func waitKilled(t *testing.T, server []int, term time.Duration) {
	t.Helper()
	eventually(t, instanceapi.HeartbeatDeadline+instanceapi.LeaseRenewPeriod+term, func() bool {
		all := procs()
		for _, pid := range server {
			if p, ok := all[pid]; ok && p.state != "Z" {
				return false
			}
		}
		return true
	}, fmt.Sprintf("the %d frozen postgres processes to be killed", len(server)))
}
