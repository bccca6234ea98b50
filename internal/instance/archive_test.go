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

// Point-in-time recovery, end to end on real PostgreSQL: a base backup of
// an archiving primary (pg_basebackup waits until the WAL it needs is
// archived through the manager), rows committed before and after a target
// time, and a restore of the base backup replaying the archive to that
// time holds exactly the rows committed before it. Its restore_command
// copies from a directory the test fills with wal.Fetch: the stand-in for
// the manager's fetch, which is not built yet.
func TestBaseBackupAndArchiveRecoverToATime(t *testing.T) {
	ctx := context.Background()
	in := newInstance(t)
	root := t.TempDir()
	// The manager writes WAL as the runner, the test base backups as itself.
	if err := os.MkdirAll(filepath.Join(root, "orders", "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, root)
	in.writeFile("config/"+instanceapi.ArchiveFile, `{"directory":"`+root+`","prefix":"orders/"}`)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	st := backup.NewDir(root)

	in.exec(ctx, "CREATE TABLE events (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	in.exec(ctx, "INSERT INTO events (id) SELECT generate_series(1, 100)")
	src := wal.Source{Host: "127.0.0.1", Port: in.pgPort, User: "streaming_replica", Password: "repl-secret", BinDir: testpg.BinDir(t)}
	took, err := wal.TakeBase(ctx, src, st, "orders/", "b1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("base backup: %+v", took)
	in.exec(ctx, "INSERT INTO events (id) SELECT generate_series(101, 200)")
	time.Sleep(1100 * time.Millisecond)
	target := in.query(ctx, "SELECT clock_timestamp()::text")
	time.Sleep(1100 * time.Millisecond)
	in.exec(ctx, "INSERT INTO events (id) SELECT generate_series(201, 300)")
	last := in.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, func() bool {
		_, err := st.Size(ctx, wal.Key("orders/", last))
		return err == nil
	}, last+" archived")

	b, err := wal.FindBase(ctx, st, "orders/", "b1")
	if err != nil || b != took {
		t.Fatalf("FindBase = %+v, %v; want %+v", b, err, took)
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := wal.ExtractBase(ctx, st, "orders/", b, data); err != nil {
		t.Fatal(err)
	}
	plain := t.TempDir()
	keys, err := st.List(ctx, "orders/wal/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		name := strings.TrimSuffix(filepath.Base(k), ".zst")
		if err := wal.Fetch(ctx, st, "orders/", name, filepath.Join(plain, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The copy runs outside any manager: let the test's superuser in over
	// TCP, which the managed pg_hba.conf refuses.
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte("host all all 127.0.0.1/32 trust\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "recovery.signal"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, data)
	testpg.ChownToRunner(t, plain)
	restored := testpg.StartOn(t, data, "restore_command=cp "+plain+"/%f %p", "recovery_target_time="+target,
		"recovery_target_action=promote", "archive_mode=off")
	eventually(t, 30*time.Second, func() bool {
		return restored.Query(t, "orders", "SELECT pg_is_in_recovery()::text") == "false"
	}, "the restored server finishing recovery")
	if got := restored.Query(t, "orders", "SELECT count(*) || ':' || max(id) FROM events"); got != "200:200" {
		t.Fatalf("restored to %s: rows %s, want 200:200 (those committed before the target)", target, got)
	}

	// A flipped byte in the stored base backup is refused.
	blob := filepath.Join(root, "orders", "base", "b1", "base.tar.zst")
	testpg.FlipByte(t, blob, blob)
	if err := wal.ExtractBase(ctx, st, "orders/", b, t.TempDir()); err == nil {
		t.Fatal("a corrupted base backup was extracted")
	} else {
		t.Logf("corrupted base backup refused: %v", err)
	}
}
