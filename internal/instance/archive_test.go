package instance_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// A primary told to archive does so through its manager: PostgreSQL's
// archive_command asks the manager, which ships each finished segment
// compressed to the archive, where it reads back whole.
func TestPrimaryArchivesWALThroughItsManager(t *testing.T) {
	ctx := context.Background()
	in := newInstance(t)
	archive := t.TempDir()
	testpg.ChownToRunner(t, archive)
	in.writeFile("config/"+instanceapi.ArchiveFile, `{"directory":"`+archive+`","prefix":"orders/"}`)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	if got := in.show(ctx, "archive_mode"); got != "always" {
		t.Fatalf("archive_mode = %q, want always", got)
	}

	in.exec(ctx, "CREATE TABLE filler (x text)")
	var switched []string
	for range 4 {
		in.exec(ctx, "INSERT INTO filler SELECT md5(g::text) FROM generate_series(1, 5000) g")
		switched = append(switched, in.superuser("SELECT pg_walfile_name(pg_switch_wal())"))
	}
	last := switched[len(switched)-1]
	eventually(t, 30*time.Second, func() bool {
		return in.superuser("SELECT last_archived_wal FROM pg_stat_archiver") == last
	}, "PostgreSQL reporting "+last+" archived")
	if failed := in.superuser("SELECT failed_count FROM pg_stat_archiver"); failed != "0" {
		t.Fatalf("pg_stat_archiver counts %s failures", failed)
	}
	if s := in.status().Archive; s == nil || s.LastArchived != last || s.Archived < len(switched) || s.Failed != 0 ||
		s.LastArchivedTime == nil {
		t.Fatalf("status.archive = %+v, want %s archived last and no failure", s, last)
	}
	st := backup.NewDir(archive)
	for _, name := range switched {
		dest := filepath.Join(t.TempDir(), name)
		if err := wal.Fetch(ctx, st, "orders/", name, dest); err != nil {
			t.Fatalf("segment %s: %v", name, err)
		}
		if fi, err := os.Stat(dest); err != nil || fi.Size() != 16<<20 {
			t.Fatalf("segment %s came back with %v bytes (%v)", name, fi, err)
		}
	}
	keys, err := st.List(ctx, "orders/wal/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ".zst") {
			t.Fatalf("%s stored uncompressed", k)
		}
	}
}

// A replica archives the WAL it receives (archive_mode = always), so a
// primary that dies before it shipped its last segments leaves no gap:
// here the primary ships nothing at all, its replica ships every segment,
// and after the failover the new primary continues the archive on its new
// timeline, history file first.
func TestArchiveHasNoGapAfterAFailover(t *testing.T) {
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	archive := t.TempDir()
	testpg.ChownToRunner(t, archive)
	prim, repl, _ := lt.linkedPairWith(nil, func(_, repl *instance) {
		repl.writeFile("config/"+instanceapi.ArchiveFile, `{"directory":"`+archive+`","prefix":"orders/"}`)
	})
	st := backup.NewDir(archive)
	archived := func(names ...string) func() bool {
		return func() bool {
			for _, name := range names {
				if _, err := st.Size(ctx, wal.Key("orders/", name)); err != nil {
					return false
				}
			}
			return true
		}
	}

	var old []string
	for i := range 3 {
		prim.exec(ctx, fmt.Sprintf("INSERT INTO items SELECT g, 'x' FROM generate_series(%d, %d) g", 1000+10*i, 1009+10*i))
		old = append(old, prim.superuser("SELECT pg_walfile_name(pg_switch_wal())"))
	}
	eventually(t, 30*time.Second, archived(old...), "the replica archiving the primary's segments "+strings.Join(old, ", "))

	prim.stop()
	lt.transfer("orders-1")
	if code := promote(t, repl, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	repl.exec(ctx, "INSERT INTO items VALUES (5000, 'after the failover')")
	next := repl.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	if !strings.HasPrefix(next, "00000002") {
		t.Fatalf("the new primary switched %s, want a segment of timeline 2", next)
	}
	eventually(t, 30*time.Second, archived("00000002.history", next), "the new primary archiving its timeline's history and "+next)
	for _, name := range append(old, "00000002.history", next) {
		if err := wal.Fetch(ctx, st, "orders/", name, filepath.Join(t.TempDir(), "f")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
