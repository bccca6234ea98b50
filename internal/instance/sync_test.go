package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
