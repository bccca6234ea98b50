package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

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
