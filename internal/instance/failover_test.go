package instance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testenv"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

const apiToken = "token-for-tests"

// proxy forwards 127.0.0.1 connections to a port until it is cut: a
// network partition between a replica and its primary, on loopback.
type proxy struct {
	l      net.Listener
	mu     sync.Mutex
	target int
	conns  []net.Conn
	cut    bool
}

func newProxy(t *testing.T, target int) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	t.Cleanup(func() { _ = l.Close(); p.partition() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = in.Close()
				continue
			}
			out, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.target))
			if err != nil {
				p.mu.Unlock()
				_ = in.Close()
				continue
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return p
}

func (p *proxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

// heal lets new connections through again.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// retarget sends new connections to another port, and cuts the old ones.
func (p *proxy) retarget(port int) {
	p.partition()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target, p.cut = port, false
}

func (p *proxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// leaseTest is a primary lease in a real API server, and instances that
// obey it.
type leaseTest struct {
	t   *testing.T
	env *testenv.Env
	key client.ObjectKey
}

func newLeaseTest(t *testing.T, holder string) *leaseTest {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ns := env.Namespace(t)
	lt := &leaseTest{t: t, env: env, key: client.ObjectKey{Namespace: ns, Name: instanceapi.LeaseName("orders")}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lt.key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	if err := env.Client.Create(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return lt
}

// instance makes an instance that takes its role from the lease and
// streams from primaryPort when it is a replica.
func (lt *leaseTest) instance(primaryPort int) *instance {
	// No peer addresses: a replica streams from --primary-host, which each
	// test points (through a proxy it can cut, say) where it wants.
	in := newInstance(lt.t, "--lease", lt.key.Name, "--namespace", lt.key.Namespace, "--peers=",
		"--primary-host", "127.0.0.1", "--primary-port", strconv.Itoa(primaryPort))
	in.writeFile("secrets/api-token", apiToken)
	lt.env.WriteKubeconfig(lt.t, filepath.Join(in.root, "kubeconfig"))
	in.env = append(in.env, "KUBECONFIG="+filepath.Join(in.root, "kubeconfig"))
	return in
}

// pair makes two instances that each stream from the other when a replica.
func (lt *leaseTest) pair() (*instance, *instance) {
	a, b := lt.instance(0), lt.instance(0)
	a.extraFlags[len(a.extraFlags)-1] = strconv.Itoa(b.pgPort)
	b.extraFlags[len(b.extraFlags)-1] = strconv.Itoa(a.pgPort)
	return a, b
}

func (lt *leaseTest) get() *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if err := lt.env.Client.Get(context.Background(), lt.key, l); err != nil {
		lt.t.Fatal(err)
	}
	return l
}

// transfer is what the operator does at failover: name another holder.
func (lt *leaseTest) transfer(to string) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lt.key.Namespace, Name: lt.key.Name}}
	lt.env.Update(lt.t, l, func() {
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(to), ptr.To(metav1.NewMicroTime(time.Now()))
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	})
}

func promote(t *testing.T, in *instance, token string) int {
	return post(t, in, instanceapi.PathPromote, token, nil, nil)
}

// post calls an authenticated path of in's API with body as JSON (nil:
// none) and decodes the answer into out (nil: ignored).
func post(t *testing.T, in *instance, path, token string, body, out any) int {
	t.Helper()
	code, err := tryPost(in, path, token, body, out)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// tryPost is post for a goroutine other than the test's: it returns the
// error a test would fail on.
func tryPost(in *instance, path, token string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(http.MethodPost, in.url(path), r)
	if token != "" {
		req.Header.Set(instanceapi.AuthorizationHeader, "Bearer "+token)
	}
	resp, err := in.client().Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, nil
}

// The failover protocol on real PostgreSQL and a real API server: a
// replica cut off from its primary misses the primary's last writes; the
// lease moves to it and it promotes; the old primary sees the lease gone,
// kills its postgres, rewinds its data (throwing away what only it had) and
// follows the new primary.
func TestFailoverPromotesFencesAndRejoins(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	// Each instance streams from the other when it is a replica; orders-1
	// reaches orders-0 through a proxy the test can cut.
	old := lt.instance(0)
	repl := lt.instance(0)
	link := newProxy(t, old.pgPort)
	old.extraFlags[len(old.extraFlags)-1] = strconv.Itoa(repl.pgPort)
	repl.extraFlags[len(repl.extraFlags)-1] = strconv.Itoa(link.port())
	for _, in := range []*instance{old, repl} {
		in.writeFile("config/"+instanceapi.ReplicationFile, `{"instances":["orders-0","orders-1"]}`)
	}
	slotActive := func(in *instance, slot string) bool {
		return in.query(ctx, "SELECT count(*)::text FROM pg_replication_slots WHERE active AND slot_name = '"+slot+"'") == "1"
	}

	old.start("orders-0")
	old.waitReady(90 * time.Second)
	if l := lt.get(); l.Spec.RenewTime == nil || l.Annotations[instanceapi.AnnotationLeaseLSN] == "" {
		t.Fatalf("the primary does not renew its lease: %+v", l.Spec)
	}
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	old.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text)")
	old.exec(ctx, "INSERT INTO items SELECT g, 'before' FROM generate_series(1, 100) g")
	want := checksum(t, old)
	eventually(t, 30*time.Second, func() bool { return checksum(t, repl) == want }, "the replica caught up")
	eventually(t, 30*time.Second, func() bool { return slotActive(old, "daytwo_orders_1") }, "the replica streaming through its slot")

	// Only the lease holder may be promoted, and only by the operator.
	if code := promote(t, repl, ""); code != http.StatusUnauthorized {
		t.Fatalf("promote without a token = %d, want 401", code)
	}
	if code := promote(t, repl, apiToken); code != http.StatusConflict {
		t.Fatalf("promote of an instance the lease does not name = %d, want 409", code)
	}

	// The partition: the old primary acknowledges writes the replica never gets.
	link.partition()
	old.exec(ctx, "INSERT INTO items SELECT g, 'split' FROM generate_series(101, 120) g")
	lt.transfer("orders-1")
	// The lease's word is enough: the replica it names promotes itself,
	// and the operator's call, which follows, finds it promoted.
	eventually(t, 10*time.Second, func() bool {
		got := repl.status()
		return got.Role == instanceapi.RolePrimary && !got.InRecovery
	}, "the replica the lease names to promote itself")
	if code := promote(t, repl, apiToken); code != http.StatusOK {
		t.Fatalf("promote of a primary the lease names = %d, want 200", code)
	}
	repl.exec(ctx, "INSERT INTO items SELECT g, 'after' FROM generate_series(121, 130) g")

	// The old primary fences itself within a renewal period, then rejoins.
	eventually(t, 10*time.Second, func() bool { return old.status().Role == instanceapi.RoleReplica }, "the old primary to step down")
	old.waitReady(120 * time.Second)
	if s := old.status(); !s.InRecovery || !s.Streaming {
		t.Fatalf("the old primary rejoined as %+v", s)
	}
	want = checksum(t, repl)
	eventually(t, 30*time.Second, func() bool { return checksum(t, old) == want }, "the old primary to hold the new primary's data")
	if n := old.query(ctx, "SELECT count(*)::text FROM items WHERE v = 'split'"); n != "0" {
		t.Fatalf("%s rows only the old primary had survived the rewind", n)
	}
	// The slots followed the primary: the new one keeps one for the old,
	// which streams through it and kept none of its own.
	eventually(t, 30*time.Second, func() bool { return slotActive(repl, "daytwo_orders_0") }, "the old primary streaming through its slot")
	eventually(t, 30*time.Second, func() bool {
		return old.query(ctx, "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name LIKE 'daytwo%'") == "0"
	}, "the old primary's own slots dropped")
	if l := lt.get(); *l.Spec.HolderIdentity != "orders-1" {
		t.Fatalf("lease holder %s, want orders-1", *l.Spec.HolderIdentity)
	}
}

// dataDir identifies the data directory in place now: a clone swaps in a
// new one, a rewind keeps it.
func (in *instance) dataDir() uint64 {
	in.t.Helper()
	fi, err := os.Stat(filepath.Join(in.root, "data"))
	if err != nil {
		in.t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// staysReady returns a check, to call often, that fails the test once the
// instance has not been ready for over a second: a kubelet probing every
// second, twice, could see that and take it out of its Services.
func (in *instance) staysReady(during string) func() {
	var unready time.Time
	return func() {
		switch {
		case in.readyz():
			unready = time.Time{}
		case unready.IsZero():
			unready = time.Now()
		case time.Since(unready) > time.Second:
			in.t.Fatalf("%s: not ready for over a second", during)
		}
	}
}

// smallWALKeep makes a primary keep little WAL for slots: 32 MB.
var smallWALKeep = map[string]string{"max_slot_wal_keep_size": "32MB", "wal_keep_size": "0", "min_wal_size": "32MB", "max_wal_size": "64MB"}

// slotStatus reads the state of orders-1's slot: "<wal_status>:<active>".
const slotStatus = "SELECT coalesce(string_agg(wal_status || ':' || active, ','), 'none') FROM pg_replication_slots WHERE slot_name = 'daytwo_orders_1'"

// linkedPair starts orders-0 as the primary and orders-1 as its replica,
// which reaches it through a proxy the test can cut; each streams from the
// other when a replica, and both keep little WAL for slots (smallWALKeep).
// It returns once the replica streams through its slot, with 100 rows in
// items.
func (lt *leaseTest) linkedPair() (prim, repl *instance, link *proxy) {
	return lt.linkedPairWith(nil)
}

// withSettings is base with more settings.
func withSettings(base, more map[string]string) map[string]string {
	all := maps.Clone(base)
	maps.Copy(all, more)
	return all
}

// linkedPairWith is linkedPair with settings besides smallWALKeep, and
// setup run on both before they start.
func (lt *leaseTest) linkedPairWith(settings map[string]string, setup ...func(prim, repl *instance)) (prim, repl *instance, link *proxy) {
	ctx := context.Background()
	prim, repl = lt.instance(0), lt.instance(0)
	link = newProxy(lt.t, prim.pgPort)
	prim.extraFlags[len(prim.extraFlags)-1] = strconv.Itoa(repl.pgPort)
	repl.extraFlags[len(repl.extraFlags)-1] = strconv.Itoa(link.port())
	for _, in := range []*instance{prim, repl} {
		in.writeFile("config/"+instanceapi.ReplicationFile, `{"instances":["orders-0","orders-1"]}`)
		in.setParameters(withSettings(smallWALKeep, settings))
	}
	for _, f := range setup {
		f(prim, repl)
	}
	prim.start("orders-0")
	prim.waitReady(90 * time.Second)
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	prim.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text)")
	prim.exec(ctx, "INSERT INTO items SELECT g, 'before' FROM generate_series(1, 100) g")
	eventually(lt.t, 30*time.Second, func() bool { return prim.query(ctx, slotStatus) == "reserved:true" },
		"the replica streaming through its slot")
	return prim, repl, link
}

// outgrowSlot writes and checkpoints on prim until it invalidated
// orders-1's slot and removed the WAL the slot held.
func outgrowSlot(t *testing.T, prim *instance) {
	ctx := context.Background()
	prim.exec(ctx, "CREATE TABLE filler (x text)")
	eventually(t, 2*time.Minute, func() bool {
		prim.exec(ctx, "INSERT INTO filler SELECT repeat(md5(g::text), 32) FROM generate_series(1, 10000) g")
		prim.superuser("SELECT pg_switch_wal(); CHECKPOINT")
		return strings.HasPrefix(prim.query(ctx, slotStatus), "lost:")
	}, "the primary invalidating orders-1's slot")
}

// An old primary that cannot be rewound: cut off from its replica, it
// wrote and checkpointed so much that the WAL since the two diverged is
// gone, so pg_rewind has nothing to work from. After the failover it is
// cloned from the new primary instead, and holds exactly its rows.
func TestOldPrimaryThatCannotRewindIsClonedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	old, repl, link := lt.linkedPair()

	link.partition()
	old.exec(ctx, "INSERT INTO items SELECT g, 'split' FROM generate_series(101, 120) g")
	outgrowSlot(t, old)
	dir := old.dataDir()
	lt.transfer("orders-1")
	if code := promote(t, repl, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	repl.exec(ctx, "INSERT INTO items SELECT g, 'after' FROM generate_series(121, 130) g")
	start := time.Now()
	want := checksum(t, repl)
	eventually(t, 3*time.Minute, func() bool {
		s := old.status()
		return s.Role == instanceapi.RoleReplica && s.Streaming && s.Phase == instanceapi.PhaseRunning && checksum(t, old) == want
	}, "the old primary cloned again and streaming from the new one")
	t.Logf("the old primary follows again %s after the failover", time.Since(start).Round(100*time.Millisecond))
	if n := old.query(ctx, "SELECT count(*)::text FROM items WHERE v = 'split'"); n != "0" {
		t.Fatalf("%s rows only the old primary had survived", n)
	}
	if old.dataDir() == dir {
		t.Fatal("the old primary's data directory is the same one: it was not cloned again")
	}
}

// A replica whose pg_rewind was interrupted (its marker is still next to
// the data directory) cannot trust its data: it clones the primary again
// on its next start instead of running postgres on it.
func TestUnfinishedRewindIsClonedAgain(t *testing.T) {
	t.Parallel()
	lt := newLeaseTest(t, "orders-0")
	prim, repl, _ := lt.linkedPair()
	repl.stop()
	dir := repl.dataDir()
	repl.writeFile("data.rewinding", "pg_rewind started\n")
	repl.start("orders-1")
	repl.waitReady(2 * time.Minute)
	want := checksum(t, prim)
	eventually(t, 2*time.Minute, func() bool {
		s := repl.status()
		return s.Streaming && s.Phase == instanceapi.PhaseRunning && checksum(t, repl) == want
	}, "the replica cloned again and streaming")
	if repl.dataDir() == dir {
		t.Fatal("the replica ran on the data of an unfinished rewind: it was not cloned again")
	}
	if _, err := os.Stat(filepath.Join(repl.root, "data.rewinding")); !os.IsNotExist(err) {
		t.Fatalf("the marker is still there after the clone: %v", err)
	}
}

// A replica cut off while the primary writes more WAL than
// max_slot_wal_keep_size: the primary invalidates the replica's slot and
// removes WAL the replica never received. Once the link is back the
// replica finds out, clones the primary again and streams through a new
// slot, holding every row. In the second case the slot was made again on
// the primary before the replica asked (as one that streamed without a
// slot would find it): only the primary's refusal to stream from the
// replica's position tells.
func TestReplicaWhoseWALIsGoneIsClonedAgain(t *testing.T) {
	t.Parallel()
	for _, remade := range []bool{false, true} {
		t.Run(map[bool]string{false: "slot lost", true: "slot made again"}[remade], func(t *testing.T) {
			replicaWhoseWALIsGone(t, remade)
		})
	}
}

func replicaWhoseWALIsGone(t *testing.T, remakeSlot bool) {
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	prim, repl, link := lt.linkedPair()

	link.partition()
	outgrowSlot(t, prim)
	if remakeSlot {
		prim.superuser("SELECT pg_drop_replication_slot('daytwo_orders_1'); SELECT pg_create_physical_replication_slot('daytwo_orders_1', true)")
		if got := prim.query(ctx, slotStatus); got != "reserved:false" {
			t.Fatalf("the slot made again is %q, want reserved:false", got)
		}
	}
	prim.exec(ctx, "INSERT INTO items SELECT g, 'while cut off' FROM generate_series(101, 120) g")
	dir := repl.dataDir()
	// The status is observed once a second: let it catch up with the cut.
	eventually(t, 10*time.Second, func() bool { return !repl.status().Streaming }, "the cut-off replica reporting it does not stream")
	cloned := time.Now()
	link.heal()

	want := checksum(t, prim)
	eventually(t, 3*time.Minute, func() bool {
		s := repl.status()
		if s.Streaming && repl.dataDir() == dir {
			// A walreceiver the primary refuses at once must not pass for
			// streaming: the check that clones it again waits for a stretch
			// without streaming, and the replica would look ready.
			t.Fatal("the replica reported streaming while the primary refused its slot")
		}
		return s.Streaming && s.Phase == instanceapi.PhaseRunning && checksum(t, repl) == want
	}, "the replica cloned again, streaming and holding every row")
	t.Logf("the replica streams again %s after the link came back", time.Since(cloned).Round(100*time.Millisecond))
	var slot string
	defer func() {
		if t.Failed() {
			t.Logf("the slot's last status: %s", slot)
		}
	}()
	// In use and not lost: with smallWALKeep, a busy machine may see it
	// "unreserved" (past max_wal_size) for a while, which is no failure.
	eventually(t, 30*time.Second, func() bool {
		slot = prim.query(ctx, slotStatus)
		return strings.HasSuffix(slot, ":true") && !strings.HasPrefix(slot, "lost:")
	}, "a new slot in use")
	if repl.dataDir() == dir {
		t.Fatal("the replica's data directory is the same one: it was not cloned again")
	}
}

// With a WAL archive, a replica whose primary removed the WAL it needs (its
// slot invalidated) catches up from the archive through restore_command,
// makes its slot again and streams: it is not cloned again. Without the
// archive it would be (the test above).
func TestReplicaCatchesUpFromTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	prim, repl, link, archive := lt.archivingPair()
	st := backup.NewDir(archive)

	link.partition()
	outgrowSlot(t, prim)
	prim.exec(ctx, "INSERT INTO items SELECT g, 'while cut off' FROM generate_series(101, 120) g")
	last := prim.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, time.Minute, func() bool {
		_, err := st.Size(ctx, wal.Key("orders/", last))
		return err == nil
	}, "the primary archiving "+last)
	dir := repl.dataDir()
	eventually(t, 10*time.Second, func() bool { return !repl.status().Streaming }, "the cut-off replica reporting it does not stream")
	healed := time.Now()
	link.heal()

	want := checksum(t, prim)
	eventually(t, 2*time.Minute, func() bool {
		if repl.dataDir() != dir {
			t.Fatal("the replica was cloned again: it did not catch up from the archive")
		}
		s := repl.status()
		return s.Streaming && s.Phase == instanceapi.PhaseRunning && checksum(t, repl) == want
	}, "the replica caught up from the archive, streaming and holding every row")
	t.Logf("the replica streams again %s after the link came back", time.Since(healed).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, func() bool {
		slot := prim.query(ctx, slotStatus)
		return strings.HasSuffix(slot, ":true") && !strings.HasPrefix(slot, "lost:")
	}, "its slot made again and in use")
}

// A setting a replica may not run below its primary is lowered while the
// replica is cut off: the primary restarts with it first, as the operator
// does, then the replica restarts with it before it has replayed the
// primary's change. PostgreSQL would refuse to start it; it starts with the
// primary's old value instead, and once it has replayed the change it
// restarts by itself to run its own.
func TestReplicaBehindALoweredSettingStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	const name = "max_locks_per_transaction"
	high := map[string]string{name: "128"}
	low := withSettings(smallWALKeep, map[string]string{name: "64"})
	prim, repl, link := lt.linkedPairWith(high)

	link.partition()
	prim.setParameters(low)
	restartWith(t, prim, name, "64")
	prim.exec(ctx, "INSERT INTO items SELECT g, 'lowered' FROM generate_series(101, 120) g")
	repl.setParameters(low)
	restartWith(t, repl, name, "128")
	if s := repl.status(); s.Streaming {
		t.Fatal("the replica streams through a cut link")
	} else if !slices.Equal(s.RaisedSettings, []string{name}) {
		t.Errorf("started above its file: raisedSettings = %q, want [%s] (the operator must not count it done)", s.RaisedSettings, name)
	}

	healed := time.Now()
	link.heal()
	want := checksum(t, prim)
	eventually(t, time.Minute, func() bool {
		s := repl.status()
		return s.Phase == instanceapi.PhaseRunning && s.Streaming && s.StandbySettings[name] == "64" && !s.PendingRestart &&
			len(s.RaisedSettings) == 0 && checksum(t, repl) == want
	}, "the replica running its own lowered setting, streaming every row")
	t.Logf("the replica runs %s = 64 %s after the link came back", name, time.Since(healed).Round(100*time.Millisecond))
}

// A replica running its primary's higher value (a floor) is promoted: a
// primary's floors never replay away, so the promotion drops them from its
// configuration and postgres reports the setting pending a restart (which
// the operator's lowerOnPrimaryFirst waits for), and a restart runs its own.
// Before, its configuration kept the floor, nothing was pending, and the
// operator waited for ever.
func TestReplicaPromotedAboveItsSetting(t *testing.T) {
	t.Parallel()
	lt := newLeaseTest(t, "orders-0")
	const name = "max_locks_per_transaction"
	prim, repl, _ := lt.linkedPairWith(map[string]string{name: "128"})
	repl.setParameters(withSettings(smallWALKeep, map[string]string{name: "64"}))
	eventually(t, 30*time.Second, func() bool {
		return slices.Contains(repl.status().PendingRestartSettings, name)
	}, name+" pending a restart")
	if code := post(t, repl, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	eventually(t, time.Minute, func() bool {
		s := repl.status()
		return s.Phase == instanceapi.PhaseRunning && s.Streaming && slices.Equal(s.RaisedSettings, []string{name})
	}, "the replica streaming at its primary's "+name)

	prim.stop()
	lt.transfer("orders-1")
	if code := promote(t, repl, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	eventually(t, 30*time.Second, func() bool {
		s := repl.status()
		return s.Role == instanceapi.RolePrimary && s.StandbySettings[name] == "128" &&
			slices.Contains(s.PendingRestartSettings, name) && slices.Equal(s.RaisedSettings, []string{name})
	}, "the new primary still at 128, with "+name+" pending a restart and reported raised")
	if code := post(t, repl, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	eventually(t, time.Minute, func() bool {
		s := repl.status()
		return s.Phase == instanceapi.PhaseRunning && s.Role == instanceapi.RolePrimary && s.StandbySettings[name] == "64" &&
			!s.PendingRestart && len(s.RaisedSettings) == 0
	}, "the new primary running its own "+name+" after a restart in place")
}

// restartWith restarts in through the API and waits until it runs with
// setting at value.
func restartWith(t *testing.T, in *instance, setting, value string) {
	t.Helper()
	eventually(t, 30*time.Second, func() bool {
		return slices.Contains(in.status().PendingRestartSettings, setting)
	}, setting+" pending a restart")
	// The operator restarts in place while the file loaded is not the one
	// postgres started with, and moves the pod once they agree.
	if s := in.status(); s.StartConfigHash == "" || s.StartConfigHash == s.ConfigHash {
		t.Fatalf("pending a restart: started with %q, loaded %q", s.StartConfigHash, s.ConfigHash)
	}
	if code := post(t, in, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	// Started with the file it loaded: the restart happened (the status
	// may still say Running a moment after the 202, and a replica at its
	// primary's value ran it before too).
	eventually(t, time.Minute, func() bool {
		s := in.status()
		return s.Phase == instanceapi.PhaseRunning && s.StandbySettings[setting] == value && s.StartConfigHash == s.ConfigHash
	}, fmt.Sprintf("restarted with the new file, running %s = %s", setting, value))
}

// A replica ahead of the one promoted: it received WAL of the old
// timeline past the new timeline's fork, so it cannot follow the new
// primary. It finds out from the primary's timeline history, stops
// cleanly, rewinds and streams, holding exactly the new primary's rows.
func TestDivergedReplicaIsRewound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	a, b, c := lt.instance(0), lt.instance(0), lt.instance(0)
	linkB, linkC := newProxy(t, a.pgPort), newProxy(t, a.pgPort)
	a.extraFlags[len(a.extraFlags)-1] = strconv.Itoa(b.pgPort)
	b.extraFlags[len(b.extraFlags)-1] = strconv.Itoa(linkB.port())
	c.extraFlags[len(c.extraFlags)-1] = strconv.Itoa(linkC.port())
	for _, in := range []*instance{a, b, c} {
		in.writeFile("config/"+instanceapi.ReplicationFile, `{"instances":["orders-0","orders-1","orders-2"]}`)
	}
	startTrio(ctx, a, b, c)
	want := checksum(t, a)
	eventually(t, 30*time.Second, func() bool { return checksum(t, b) == want && checksum(t, c) == want }, "both replicas caught up")

	// b is cut off; c gets writes b never sees. Then a stops and b is promoted.
	linkB.partition()
	a.exec(ctx, "INSERT INTO items SELECT g, 'only a and c' FROM generate_series(101, 120) g")
	want = checksum(t, a)
	eventually(t, 30*time.Second, func() bool { return checksum(t, c) == want }, "c holding what b lacks")
	a.stop()
	lt.transfer("orders-1")
	if code := promote(t, b, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	b.exec(ctx, "INSERT INTO items SELECT g, 'after' FROM generate_series(121, 130) g")
	start, dir := time.Now(), c.dataDir()
	linkC.retarget(b.pgPort)

	want = checksum(t, b)
	eventually(t, 2*time.Minute, func() bool {
		s := c.status()
		return s.Streaming && s.Phase == instanceapi.PhaseRunning && checksum(t, c) == want
	}, "the diverged replica rewound and streaming from the new primary")
	t.Logf("c follows b again %s after it was pointed at it", time.Since(start).Round(100*time.Millisecond))
	if n := c.query(ctx, "SELECT count(*)::text FROM items WHERE v = 'only a and c'"); n != "0" {
		t.Fatalf("%s rows of the abandoned timeline survived", n)
	}
	if c.dataDir() != dir {
		t.Fatal("the diverged replica was cloned again, not rewound")
	}
}

// joinInts renders ids for SQL's IN (...).
func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

// startTrio starts a as the primary (orders-0), then b and c as its
// replicas, and writes 100 rows to table items.
func startTrio(ctx context.Context, a, b, c *instance) {
	a.start("orders-0")
	a.waitReady(90 * time.Second)
	b.start("orders-1")
	c.start("orders-2")
	b.waitReady(90 * time.Second)
	c.waitReady(90 * time.Second)
	a.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text)")
	a.exec(ctx, "INSERT INTO items SELECT g, 'before' FROM generate_series(1, 100) g")
}

func demote(t *testing.T, in *instance, to string) (int, instanceapi.DemoteResult) {
	var res instanceapi.DemoteResult
	code := post(t, in, instanceapi.PathDemote, apiToken, instanceapi.DemoteRequest{To: to, Request: "2026-11-23T12:00:00Z"}, &res)
	return code, res
}

func promoteAfter(t *testing.T, in *instance, waitLSN string) int {
	return post(t, in, instanceapi.PathPromote, apiToken, instanceapi.PromoteRequest{WaitLSN: waitLSN}, nil)
}

// A promotion that waited for WAL reads the lease again before it promotes:
// the lease may have moved on meanwhile (another failover decided while
// this replica caught up), and then this replica stays one. The primary
// holds a lease of its own here, so moving the replica's does not fence
// it: the WAL the replica waits for still streams once the link heals.
func TestPromotionRereadsTheLeaseAfterWaitingForWAL(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lt.key.Namespace, Name: "orders-source"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-0")}}
	if err := lt.env.Client.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	// extraFlags[1] is the value of --lease (lt.instance).
	prim, repl, link := lt.linkedPairWith(nil, func(prim, _ *instance) { prim.extraFlags[1] = own.Name })

	link.partition()
	prim.exec(ctx, "INSERT INTO items SELECT g, 'cut off' FROM generate_series(101, 200) g")
	target := prim.query(ctx, "SELECT pg_current_wal_insert_lsn()::text")
	// Named with a handover the replica cannot hold yet, and no new
	// transition: the instance does not promote itself on the lease's word
	// (that path takes the same promote), so the operator's call is the
	// one that waits for target.
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lt.key.Namespace, Name: lt.key.Name}}
	lt.env.Update(t, l, func() {
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To("orders-1"), ptr.To(metav1.NewMicroTime(time.Now()))
		l.Spec.LeaseDurationSeconds = ptr.To(int32(instanceapi.LeaseDuration / time.Second))
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[instanceapi.AnnotationHandoverLSN] = target
	})
	type answer struct {
		code int
		err  error
		body instanceapi.Error
	}
	called := make(chan answer, 1)
	go func() {
		var a answer
		a.code, a.err = tryPost(repl, instanceapi.PathPromote, apiToken, instanceapi.PromoteRequest{WaitLSN: target}, &a.body)
		called <- a
	}()
	// The call is past its first lease read once it polls for target.
	eventually(t, 10*time.Second, func() bool {
		return repl.superuser("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_last_wal_receive_lsn() >= $1%' AND pid <> pg_backend_pid()") != "0"
	}, "the promote call to wait for "+target)
	lt.transfer("orders-2")
	link.heal()

	select {
	case a := <-called:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.code != http.StatusConflict || !strings.Contains(a.body.Message, "moved to another instance while this one waited") {
			t.Fatalf("promote after the lease moved away = %d (%s), want 409 for the lease moving while it waited", a.code, a.body.Message)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("promote did not answer once the link healed")
	}
	if got := repl.query(ctx, "SELECT (pg_last_wal_receive_lsn() >= '"+target+"'::pg_lsn)::text"); got != "true" {
		t.Fatalf("promote answered before the replica held %s", target)
	}
	// Not promoted, then or later.
	for range 3 {
		if got := repl.query(ctx, "SELECT pg_is_in_recovery()::text"); got != "true" {
			t.Fatalf("the replica promoted after the lease moved to orders-2 (pg_is_in_recovery = %s)", got)
		}
		if s := repl.status(); s.Role != instanceapi.RoleReplica {
			t.Fatalf("the replica reports role %s after the lease moved to orders-2", s.Role)
		}
		time.Sleep(time.Second)
	}
}

// A switchover on real PostgreSQL and a real API server, under a writer
// that records every acknowledged write it sent to the old primary's port:
// the primary shuts down cleanly and hands the lease over with its shutdown
// checkpoint, then forwards new connections to the new primary; the
// replica is promoted once it holds that WAL; every acknowledged write,
// before and after, is on the new primary; and the old primary follows it.
func TestSwitchoverLosesNoAcknowledgedWrite(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	old, repl := lt.pair()
	old.start("orders-0")
	old.waitReady(90 * time.Second)
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	old.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")

	// The writer: one connection per write to the old primary's port, as
	// an application through -rw would, on and on: after the handover the
	// old primary forwards new connections to the new one.
	var mu sync.Mutex
	var acked []int
	var lastAck, promotedAt time.Time
	var gap time.Duration
	afterPromotion := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := old.execWithin(ctx, 500*time.Millisecond, fmt.Sprintf("INSERT INTO acks VALUES (%d)", id)); err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			mu.Lock()
			now := time.Now()
			if !lastAck.IsZero() {
				gap = max(gap, now.Sub(lastAck))
			}
			lastAck = now
			acked = append(acked, id)
			if !promotedAt.IsZero() {
				afterPromotion++
			}
			mu.Unlock()
		}
	}()
	time.Sleep(500 * time.Millisecond)

	if code, _ := demote(t, repl, "orders-0"); code != http.StatusConflict {
		t.Fatalf("demote of a replica = %d, want 409", code)
	}
	start := time.Now()
	code, res := demote(t, old, "orders-1")
	if code != http.StatusOK || res.LSN == "" {
		t.Fatalf("demote = %d %+v", code, res)
	}
	demoted := time.Since(start)
	if l := lt.get(); *l.Spec.HolderIdentity != "orders-1" || l.Annotations[instanceapi.AnnotationHandoverLSN] != res.LSN ||
		l.Annotations[instanceapi.AnnotationSwitchoverRequest] != "2026-11-23T12:00:00Z" {
		t.Fatalf("after the handover the lease is %v %v", *l.Spec.HolderIdentity, l.Annotations)
	}
	if code := promoteAfter(t, repl, res.LSN); code != http.StatusOK {
		t.Fatalf("promote after the handover = %d", code)
	}
	promoted := time.Since(start)
	mu.Lock()
	promotedAt = time.Now()
	mu.Unlock()
	eventually(t, 2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return afterPromotion >= 5
	}, "writes through the old primary's port, forwarded to the new one")
	close(stop)
	<-done
	// Every acknowledged write is on the new primary, those the old one
	// forwarded included.
	got := repl.query(ctx, fmt.Sprintf("SELECT count(*)::text FROM acks WHERE id IN (%s)", joinInts(acked)))
	if got != strconv.Itoa(len(acked)) {
		t.Fatalf("the new primary holds %s of the %d acknowledged writes", got, len(acked))
	}
	repl.exec(ctx, "INSERT INTO acks VALUES (1000000)")
	t.Logf("%d writes acknowledged, %d after the promotion through the old primary's port; demote took %s, demote + promote %s; "+
		"the longest stretch without an acknowledged write %s; shutdown checkpoint %s",
		len(acked), afterPromotion, demoted.Round(time.Millisecond), promoted.Round(time.Millisecond), gap.Round(time.Millisecond), res.LSN)

	// The old primary follows the new one, once its relay stops.
	eventually(t, 2*time.Minute, func() bool {
		s := old.status()
		return s.Role == instanceapi.RoleReplica && s.Phase == instanceapi.PhaseRunning && s.InRecovery && s.Streaming
	}, "the old primary to stream from the new one")
	count := "SELECT count(*)::text FROM acks"
	want := repl.query(ctx, count)
	eventually(t, 30*time.Second, func() bool { return old.query(ctx, count) == want }, "the old primary to follow the new one")
	if l := lt.get(); l.Annotations[instanceapi.AnnotationHandoverLSN] != "" {
		t.Errorf("the new primary's renewals kept the handover LSN: %v", l.Annotations)
	}
}

// A primary whose server hangs (every postgres process stopped, as on a
// dead disk) stops renewing its lease and kills postgres before the lease
// can run out, then starts again and holds it.
func TestHungPrimaryStopsRenewing(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	lt := newLeaseTest(t, "orders-0")
	in := lt.instance(1)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	pgid := 0 // the postmaster
	for pid, p := range procs() {
		if p.ppid == in.cmd.Process.Pid && p.comm == "postgres" {
			pgid = pid
		}
	}
	if pgid == 0 {
		t.Fatal("no postmaster below the instance manager")
	}
	// Every backend is a session of its own: stop each one.
	server := append(descendants(pgid, ""), pgid)
	frozenAt := time.Now()
	for _, pid := range server {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
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
	eventually(t, instanceapi.HeartbeatDeadline+instanceapi.LeaseRenewPeriod+instanceapi.LeaseDuration, func() bool {
		all := procs()
		for _, pid := range server {
			if p, ok := all[pid]; ok && p.state != "Z" {
				return false
			}
		}
		return true
	}, fmt.Sprintf("the %d frozen postgres processes to be killed", len(server)))
	fenced := time.Since(frozenAt)
	renewed := lt.get().Spec.RenewTime.Time
	if expiry := renewed.Add(instanceapi.LeaseDuration); !time.Now().Before(expiry) {
		t.Fatalf("postgres was killed only after the lease expired (%s)", expiry)
	}
	t.Logf("frozen postgres killed %s after the freeze; the lease, last renewed %s after the freeze, had %s left",
		fenced.Round(time.Millisecond), renewed.Sub(frozenAt).Round(time.Millisecond),
		time.Until(renewed.Add(instanceapi.LeaseDuration)).Round(time.Millisecond))
	in.waitReady(90 * time.Second)
	if l := lt.get(); !l.Spec.RenewTime.After(frozenAt) {
		t.Fatal("the restarted primary does not renew its lease")
	}
}

// exec runs sql as the application owner.
// execWithin runs sql as the application owner on a new connection, all
// within d, as a client with a deadline would.
func (in *instance) execWithin(ctx context.Context, d time.Duration, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	_, err = c.Exec(ctx, sql)
	return err
}

func (in *instance) exec(ctx context.Context, sql string) {
	in.t.Helper()
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		in.t.Fatalf("connect: %v", err)
	}
	defer func() { _ = c.Close(ctx) }()
	if _, err := c.Exec(ctx, sql); err != nil {
		in.t.Fatalf("%s: %v", sql, err)
	}
}

// Synchronous replication on real PostgreSQL: with required durability a
// commit waits for the replica and never returns without it, while the
// primary keeps its lease; with preferred durability the primary stops
// waiting for a replica that is gone within a few seconds and waits for it
// again once it streams.
func TestSynchronousReplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	primary, repl := lt.pair()
	wish := func(required bool) {
		r, _ := json.Marshal(instanceapi.Replication{Instances: []string{"orders-0", "orders-1"}, Synchronous: 1, Required: required})
		primary.writeFile("config/"+instanceapi.ReplicationFile, string(r))
		repl.writeFile("config/"+instanceapi.ReplicationFile, string(r))
	}
	names := func() string { return primary.show(ctx, "synchronous_standby_names") }
	write := func(id int) error {
		return primary.execWithin(ctx, 2*time.Second, fmt.Sprintf("INSERT INTO acks VALUES (%d)", id))
	}
	wish(true)
	primary.start("orders-0")
	primary.waitReady(90 * time.Second)
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	const want = `ANY 1 ("orders-1")`
	if got := names(); got != want {
		t.Fatalf("synchronous_standby_names = %q, want %q", got, want)
	}
	record := func() string { return lt.get().Annotations[instanceapi.AnnotationSync] }
	eventually(t, 10*time.Second, func() bool { return record() == want }, "the lease to record the synchronous setting")
	primary.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")
	if err := write(1); err != nil {
		t.Fatalf("a write with the synchronous replica streaming: %v", err)
	}
	// The operator restarts another replica in place only while the
	// primary lists this one as streaming.
	eventually(t, 10*time.Second, func() bool { return slices.Equal(primary.status().Standbys, []string{"orders-1"}) }, "the primary to list its standby")

	// required: without the replica a commit is never acknowledged, and the
	// primary still holds its lease (the heartbeat waits for no standby).
	repl.stop()
	stopped := time.Now()
	if err := write(2); err == nil {
		t.Fatal("a commit was acknowledged with required durability and no synchronous replica")
	}
	if got := names(); got != want {
		t.Fatalf("required durability changed synchronous_standby_names to %q", got)
	}
	eventually(t, 10*time.Second, func() bool { return len(primary.status().Standbys) == 0 }, "the primary to list no standby")
	if l := lt.get(); *l.Spec.HolderIdentity != "orders-0" || !l.Spec.RenewTime.After(stopped.Add(time.Second)) {
		t.Fatalf("the primary waiting for its standby stopped renewing its lease: %+v", l.Spec)
	}

	// preferred: the primary stops waiting for the missing replica.
	wish(false)
	start := time.Now()
	eventually(t, 10*time.Second, func() bool { return names() == "" }, "the primary to stop waiting for the missing replica")
	// It loosened only once the lease recorded the change: failover never
	// counts on a quorum the commits no longer have.
	if got := record(); got != want+instanceapi.SyncSeparator && got != "" {
		t.Fatalf("the lease records %q once the primary stopped waiting", got)
	}
	eventually(t, 10*time.Second, func() bool { return record() == "" }, "the lease to record asynchronous replication")
	if err := write(3); err != nil {
		t.Fatalf("a write under preferred durability without the replica: %v", err)
	}
	t.Logf("preferred durability: writable again %s after the wish changed", time.Since(start).Round(time.Millisecond))

	// ...and waits for it again once it streams.
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	eventually(t, 10*time.Second, func() bool { return names() == want }, "the primary to wait for the replica again")
	if err := write(4); err != nil {
		t.Fatalf("a write with the replica back: %v", err)
	}
	if got := repl.query(ctx, "SELECT count(*)::text FROM acks WHERE id IN (1, 3, 4)"); got != "3" {
		t.Errorf("the replica holds %s of the 3 acknowledged writes", got)
	}
}

// A postmaster killed from outside (the OOM killer, say) is started again
// by its instance manager, with crash recovery, without a container
// restart: the manager stays up, every committed row is there, and the
// primary keeps its lease. Three kills in a row.
func TestKilledPostgresRestartsInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	in := lt.instance(1)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")
	for round := 1; round <= 3; round++ {
		in.exec(ctx, fmt.Sprintf("INSERT INTO acks VALUES (%d)", round))
		postmaster := 0
		for pid, p := range procs() {
			if p.ppid == in.cmd.Process.Pid && p.comm == "postgres" {
				postmaster = pid
			}
		}
		if postmaster == 0 {
			t.Fatal("no postmaster below the instance manager")
		}
		killed := time.Now()
		if err := syscall.Kill(postmaster, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// It stays ready, so it stays the endpoint of -rw.
		watchReady := in.staysReady(fmt.Sprintf("round %d", round))
		eventually(t, 30*time.Second, func() bool {
			watchReady()
			c, err := in.connect(ctx, "shop", appPassword, "orders")
			if err != nil {
				return false
			}
			defer func() { _ = c.Close(ctx) }()
			_, err = c.Exec(ctx, fmt.Sprintf("INSERT INTO acks VALUES (%d)", 100+round))
			return err == nil
		}, "writes after the kill")
		t.Logf("round %d: writable again %s after the postmaster was killed", round, time.Since(killed).Round(time.Millisecond))
		for time.Since(killed) < 4*time.Second {
			watchReady()
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case err := <-in.exited:
			t.Fatalf("the instance manager exited: %v", err)
		default:
		}
	}
	if got := in.query(ctx, "SELECT count(*)::text FROM acks"); got != "6" {
		t.Fatalf("%s rows after three crashes, want 6", got)
	}

	// A restart asked through the API, as the operator does before it
	// lowers a setting replicas may not run lower than their primary: in
	// place, ready throughout, the lease kept.
	if got := in.status().StandbySettings["max_locks_per_transaction"]; got != "64" {
		t.Fatalf("status reports max_locks_per_transaction %q, want 64", got)
	}
	in.setParameters(map[string]string{"max_locks_per_transaction": "63"})
	eventually(t, 30*time.Second, func() bool {
		return slices.Contains(in.status().PendingRestartSettings, "max_locks_per_transaction")
	}, "the lowered setting pending a restart")
	if code := post(t, in, instanceapi.PathRestart, "", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("restart without a token = %d, want 401", code)
	}
	asked := time.Now()
	if code := post(t, in, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	watchReady := in.staysReady("the restart in place")
	eventually(t, 30*time.Second, func() bool {
		watchReady()
		s := in.status()
		return s.Phase == instanceapi.PhaseRunning && s.StandbySettings["max_locks_per_transaction"] == "63" && !s.PendingRestart
	}, "postgres running with the lowered setting")
	t.Logf("restarted in place with the lowered setting %s after the request", time.Since(asked).Round(time.Millisecond))
	in.exec(ctx, "INSERT INTO acks VALUES (200)")
	if l := lt.get(); *l.Spec.HolderIdentity != "orders-0" {
		t.Fatalf("the lease moved to %s", *l.Spec.HolderIdentity)
	}
}

// Replicas stream from the instance the lease names, at its own address:
// when a failover moves the lease, the other replica streams from the new
// primary within seconds, through a slot the new primary made before its
// promotion, though nothing points it there (its --primary-host still
// names the old primary, which is gone). With required durability the new
// primary's commits wait for it, so that is when writes come back. The
// deleted primary relays new connections to the new one meanwhile.
func TestReplicasFollowTheLeaseHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	a, b, c := lt.instance(0), lt.instance(0), lt.instance(0)
	peers := fmt.Sprintf("--peers=orders-0=127.0.0.1:%d,orders-1=127.0.0.1:%d,orders-2=127.0.0.1:%d", a.pgPort, b.pgPort, c.pgPort)
	r, _ := json.Marshal(instanceapi.Replication{Instances: []string{"orders-0", "orders-1", "orders-2"}, Synchronous: 1, Required: true})
	for _, in := range []*instance{a, b, c} {
		in.extraFlags[slices.Index(in.extraFlags, "--peers=")] = peers
		in.extraFlags[len(in.extraFlags)-1] = strconv.Itoa(a.pgPort)
		in.writeFile("config/"+instanceapi.ReplicationFile, string(r))
	}
	startTrio(ctx, a, b, c)

	// The failover: a's pod is deleted (SIGTERM), so a stops cleanly,
	// releases the lease and relays; the lease moves to b, b is promoted.
	deleted := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool { return lt.get().Spec.RenewTime == nil }, "a to release the lease")
	// Ready from the release on, before the lease names anyone: had it
	// turned not ready while the operator decides, -rw would lose its
	// route until the kubelet's next probe after the move.
	if !a.readyz() {
		t.Error("the deleted primary is not ready between its release and the lease's move")
	}
	// The release records a's last WAL, and b, asked for positions read
	// now, already holds it all: failover can weigh it at once.
	releasedAt := lt.get().Annotations[instanceapi.AnnotationLeaseLSN]
	fresh := b.freshStatus()
	if want, ok := postgres.ParseLSN(releasedAt); !ok || !fresh.PositionsReadNow || !lsnAtLeast(fresh.ReceivedLSN, want) {
		t.Errorf("after a's release at %q, b's status with positions read now: %+v", releasedAt, fresh)
	}
	lt.transfer("orders-1")
	start := time.Now()
	if code := promote(t, b, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	promoted := time.Since(start)
	// Each attempt writes a new row: one that timed out waiting for c is
	// committed locally all the same.
	id := 100
	write := func(via *instance) error {
		id++
		return via.execWithin(ctx, 500*time.Millisecond, fmt.Sprintf("INSERT INTO items VALUES (%d, 'after')", id))
	}
	// Through the deleted primary's port, as -rw routes while the deleted
	// pod is its only serving endpoint: a relays to b, and stays ready.
	eventually(t, 2*time.Second, func() bool { return write(a) == nil }, "a commit through the deleted primary, relayed to b, acknowledged by c")
	t.Logf("promoted in %s; the first synchronous commit on the new primary, through the deleted one, %s after the promotion began",
		promoted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if !a.readyz() {
		t.Error("the deleted primary is not ready while it relays: kube-proxy would stop routing to it")
	}
	if got := b.query(ctx, fmt.Sprintf("SELECT count(*)::text FROM items WHERE id = %d", id)); got != "1" {
		t.Fatal("the relayed write is not on the new primary")
	}
	if err := write(b); err != nil {
		t.Fatalf("a commit on the new primary: %v", err)
	}
	select {
	case <-a.exited:
		t.Logf("the deleted primary exited %s after SIGTERM", time.Since(deleted).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted primary did not exit within 30 s")
	}
	// What the release recorded is a's shutdown checkpoint.
	out, err := exec.Command(filepath.Join(testpg.BinDir(t), "pg_controldata"), filepath.Join(a.root, "data")).Output()
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := ""
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "Latest checkpoint location" {
			checkpoint = strings.TrimSpace(v)
		}
	}
	if checkpoint == "" || checkpoint != releasedAt {
		t.Errorf("the release recorded %s; a's shutdown checkpoint is %q", releasedAt, checkpoint)
	}
	if got := b.superuser("SELECT string_agg(application_name || ':' || state || ':' || sync_state, ',') FROM pg_stat_replication"); got != "orders-2:streaming:quorum" {
		t.Fatalf("the new primary's standbys: %s", got)
	}
	if got := b.superuser("SELECT count(*) FROM pg_replication_slots WHERE active AND slot_name = 'daytwo_orders_2'"); got != "1" {
		t.Fatal("c does not stream through its slot on the new primary")
	}
	if got := c.query(ctx, fmt.Sprintf("SELECT count(*)::text FROM items WHERE id = %d", id)); got != "1" {
		t.Fatal("c lacks the acknowledged row")
	}
}

// A primary that finds no data (its volume lost) once the Database has
// served must not initdb, restore or import in its place: it would serve
// an empty database as the latest. It refuses, saying why and how out, and
// bootstraps only while the lease records no service.
func TestPrimaryWithoutDataRefusesOnceTheDatabaseServed(t *testing.T) {
	t.Parallel()
	lt := newLeaseTest(t, "orders-0")
	ctx := context.Background()
	l := &coordinationv1.Lease{}
	if err := lt.env.Client.Get(ctx, lt.key, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations = map[string]string{instanceapi.AnnotationLeaseLSN: "0/3000060"}
	if err := lt.env.Client.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	in := lt.instance(testpg.FreePort(t))
	termLog := filepath.Join(in.root, "termination-log")
	in.extraFlags = append(in.extraFlags, "--termination-log", termLog)
	in.start("orders-0")
	if in.exit(60*time.Second, "instead of exiting to be restarted") == nil {
		t.Fatal("the instance exited cleanly")
	}
	if msg, _ := os.ReadFile(termLog); !strings.HasPrefix(string(msg), instanceapi.TerminationDataConflict) ||
		!strings.Contains(string(msg), "has served (its lease records WAL position 0/3000060)") {
		t.Errorf("termination message %q; want the data conflict naming the served position", msg)
	}
	if _, err := os.Stat(filepath.Join(in.root, "data", "PG_VERSION")); err == nil {
		t.Fatal("a data directory was made in place of the served one")
	}

	// A Database that never served (the lease records nothing) bootstraps.
	delete(l.Annotations, instanceapi.AnnotationLeaseLSN)
	if err := lt.env.Client.Get(ctx, lt.key, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations = nil
	if err := lt.env.Client.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.stop()
}
