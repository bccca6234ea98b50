package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
