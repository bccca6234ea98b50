package instance_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
