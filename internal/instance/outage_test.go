package instance_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// In a control-plane outage (neither instance reaches the API server) the
// primary serves on past its lease's term while its replica promises not to
// be promoted, and the replica, once the lease names it anyway, refuses to
// promote until the old primary has fenced: no write is acknowledged by the
// old primary after the new one promoted. (A primary cut off alone fences
// as before, TestRestartedPrimaryFencesWithoutTheAPIServer: its replicas
// reach the API and promise nothing.)
func TestPrimaryServesThroughAnAPIOutageOnItsPeersPromises(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	ca := newTestCA(t)
	lt := newLeaseTest(t, "orders-0")
	prim, api := lt.instanceBehindAPIProxy(0)
	rep, repAPI := lt.instanceBehindAPIProxy(prim.pgPort)
	prim.extraFlags = append(prim.extraFlags, "--tls", "--peer-apis", "orders-1=localhost:"+strconv.Itoa(rep.httpPort))
	rep.extraFlags = append(rep.extraFlags, "--tls", "--primary-host", "localhost")
	for _, in := range []*instance{prim, rep} {
		ca.issue(in)
		in.writeFile("config/"+instanceapi.ReplicationFile, `{"instances":["orders-0","orders-1"]}`)
	}
	prim.start("orders-0")
	prim.waitReady(90 * time.Second)
	prim.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")
	rep.start("orders-1")
	rep.waitReady(2 * time.Minute)
	waitFor(t, 30*time.Second, "the lease to record the replica as a voucher", func() bool {
		return lt.get().Annotations[instanceapi.AnnotationVouchers] == "orders-1"
	})

	api.partition()
	repAPI.partition()
	cut := time.Now()
	w := prim.startAckWriter(ctx, 1)
	expiry := lt.get().Spec.RenewTime.Add(instanceapi.LeaseDuration)
	waitFor(t, 30*time.Second, "the primary serving on promises, 4 s past its lease's expiry", func() bool {
		s, ok := prim.tryStatus()
		return ok && s.ServingOnPromises && time.Now().After(expiry.Add(4*time.Second))
	})
	if prim.postmaster() == 0 {
		t.Fatal("postgres does not run on the primary serving on promises")
	}
	if s := rep.status(); s.PromisedTo != "orders-0" {
		t.Errorf("the replica's status: promisedTo %q, want orders-0", s.PromisedTo)
	}
	acks := w.snapshot()
	if gap := longestGap(acks, cut, time.Now()); gap > time.Second {
		t.Errorf("writes stopped for %s while the API server was cut", gap)
	}
	t.Logf("cut from the API server for %s, %s past the lease's expiry: %d writes acknowledged, longest gap %s",
		time.Since(cut).Round(time.Millisecond), time.Since(expiry).Round(time.Millisecond), len(acks), longestGap(acks, cut, time.Now()))

	// The lease moves all the same (no operator would move it while the
	// replica vouches; the replica's own refusal is the last line), and the
	// replica sees it.
	lt.transfer("orders-1")
	repAPI.heal()
	moved := time.Now()
	refused := ""
	var promoted time.Time
	for deadline := time.Now().Add(30 * time.Second); promoted.IsZero(); {
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not promote within 30 s of the lease's move (last refusal: %s)", refused)
		}
		var e instanceapi.Error
		code, err := tryPost(rep, instanceapi.PathPromote, apiToken, nil, &e)
		switch {
		case err == nil && code == 200:
			promoted = time.Now()
		case code == 409 && refused == "":
			refused = e.Message
		}
		time.Sleep(50 * time.Millisecond)
	}
	acks = w.halt()
	if refused == "" {
		t.Error("the replica promoted at once, though it had promised the old primary")
	}
	last := acks[len(acks)-1]
	if !last.Before(promoted) {
		t.Errorf("the old primary acknowledged a write at %s, after the replica promoted at %s",
			last.Format(time.StampMilli), promoted.Format(time.StampMilli))
	}
	if prim.postmaster() != 0 {
		t.Error("the old primary still runs postgres after the replica promoted")
	}
	t.Logf("lease moved: the replica refused (%q), promoted %s later; the old primary's last write %s before that",
		refused, promoted.Sub(moved).Round(time.Millisecond), promoted.Sub(last).Round(time.Millisecond))
}

// waitFor polls cond every 50 ms until it holds, or fails the test.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// longestGap is the longest stretch in [from, to] without an acknowledgement.
func longestGap(acks []time.Time, from, to time.Time) time.Duration {
	prev, gap := from, time.Duration(0)
	for _, a := range append(acks, to) {
		if a.Before(from) {
			continue
		}
		gap = max(gap, a.Sub(prev))
		prev = a
	}
	return gap
}

func (w *ackWriter) snapshot() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.acks...)
}
