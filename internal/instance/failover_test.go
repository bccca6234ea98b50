package instance_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
