package instance_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// Point-in-time recovery, end to end on real PostgreSQL: a base backup of
// an archiving primary (pg_basebackup waits until the WAL it needs is
// archived through the manager), rows committed before and after a target
// time, and a new instance bootstrapped from the base backup and the
// archive, through its manager's restore_command, to that time: it holds
// exactly the rows committed before it, and said how far it had come while
// it replayed. A target past the archive's end is refused, never served.
//
// Sealed and encrypted, as daytwo runs it: the manager seals and encrypts
// every WAL file with the keys projected beside its secrets, the base
// backup is too, and the restore reads both with the keys from its
// environment; no stored file shows a zstd frame.
func TestBaseBackupAndArchiveRecoverToATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := newInstance(t)
	keys := backup.Keys{Seal: []byte(strings.Repeat("s", 32)), Encrypt: []byte(strings.Repeat("e", 32))}
	in.writeFile("secrets/"+instanceapi.SecretArchiveSeriesKey, string(keys.Seal)+"\n")
	in.writeFile("secrets/"+instanceapi.SecretArchiveEncryptionKey, string(keys.Encrypt)+"\n")
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
	took, err := wal.TakeBase(ctx, src, st, "orders/", "b1", keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("base backup: %+v", took)
	if !took.Encrypted || took.MAC == "" {
		t.Fatalf("the base backup is not encrypted and sealed: %+v", took)
	}
	// pgbench writes beside the events from here until after the target,
	// so replay stops at the target in the middle of a stream of other
	// transactions.
	stopLoad := pgbenchLoad(t, in)
	// Enough WAL after the base backup that replay asks for several
	// segments, and the restorer fetches ahead.
	in.exec(ctx, "CREATE TABLE filler (x text)")
	for range 3 {
		in.exec(ctx, "INSERT INTO filler SELECT md5(g::text) FROM generate_series(1, 60000) g")
		in.superuser("SELECT pg_switch_wal()")
	}
	in.exec(ctx, "INSERT INTO events (id) SELECT generate_series(101, 200)")
	targetLSN := in.superuser("SELECT pg_current_wal_lsn()")
	time.Sleep(1100 * time.Millisecond)
	target := in.query(ctx, `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`)
	time.Sleep(1100 * time.Millisecond)
	in.exec(ctx, "INSERT INTO events (id) SELECT generate_series(201, 300)")
	loaded := stopLoad()
	t.Logf("pgbench load: %d transactions", loaded)
	last := in.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, func() bool {
		_, err := st.Size(ctx, wal.Key("orders/", last))
		return err == nil
	}, last+" archived")
	if b, err := wal.FindBase(ctx, st, "orders/", "b1", keys); err != nil || b != took {
		t.Fatalf("FindBase = %+v, %v; want %+v", b, err, took)
	}
	for _, k := range []string{wal.Key("orders/", last), "orders/base/b1/" + "base.tar.zst"} {
		if b, err := os.ReadFile(filepath.Join(root, k)); err != nil || !backup.IsEncrypted(b) {
			t.Fatalf("%s is not stored encrypted (%v)", k, err)
		}
	}

	testpg.ChownToRunner(t, root)
	restore := func(t *testing.T, targetFlag, target string) *instance {
		dst := newInstance(t)
		dst.extraFlags = []string{"--from-backup", "--restore-physical", "--restore-path", root, "--restore-prefix", "orders",
			"--restore-series-key-required", targetFlag, target, "--termination-log", filepath.Join(dst.root, "termination")}
		dst.env = append(dst.env, backup.SeriesKeyEnv+"="+string(keys.Seal), backup.EncryptionKeyEnv+"="+string(keys.Encrypt))
		dst.start("copy-0")
		return dst
	}
	t.Run("to a time", func(t *testing.T) {
		dst := restore(t, "--recovery-target-time", target)
		// The status says how far replay came while it runs.
		var seen *instanceapi.RecoveryProgress
		for deadline := time.Now().Add(90 * time.Second); !dst.readyz() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if s, ok := dst.tryStatus(); ok && s.Recovery != nil && s.Recovery.ReplayedLSN != "" {
				seen = s.Recovery
			}
		}
		dst.waitReady(time.Second)
		if got := dst.query(ctx, "SELECT count(*) || ':' || max(id) FROM events"); got != "200:200" {
			t.Fatalf("restored to %s: rows %s, want 200:200 (those committed before the target)", target, got)
		}
		// The target fell in the middle of the load.
		if n, _ := strconv.Atoi(dst.query(ctx, "SELECT count(*)::text FROM pgbench_history")); n == 0 || n >= loaded {
			t.Fatalf("restored %d of %d pgbench transactions, want some but not all", n, loaded)
		} else {
			t.Logf("restored %d of %d pgbench transactions", n, loaded)
		}
		if seen == nil || seen.BaseBackup != "b1" || seen.TargetTime == nil || seen.EndLSN == "" || seen.Restored == 0 {
			t.Fatalf("progress while recovering = %+v, want the base backup, target, end and files restored", seen)
		}
		t.Logf("progress seen: %+v", *seen)
		if p := dst.status().Recovery; p != nil {
			t.Fatalf("status.recovery = %+v after recovery finished, want none", p)
		}
		// The new timeline's history waits to be archived.
		if _, err := os.Stat(filepath.Join(dst.root, "data", "pg_wal", "archive_status", "00000002.history.ready")); err != nil {
			t.Errorf("the new timeline's history is not announced for archiving: %v", err)
		}
		// A restored Database serves its own credentials, not the source's.
		if got := dst.query(ctx, "SELECT current_user"); got != "shop" {
			t.Fatalf("connected as %q", got)
		}
	})
	t.Run("to an LSN", func(t *testing.T) {
		dst := restore(t, "--recovery-target-lsn", targetLSN)
		dst.waitReady(90 * time.Second)
		if got := dst.query(ctx, "SELECT count(*) || ':' || max(id) FROM events"); got != "200:200" {
			t.Fatalf("restored to %s: rows %s, want 200:200", targetLSN, got)
		}
	})
	t.Run("past the archive's end is refused", func(t *testing.T) {
		dst := restore(t, "--recovery-target-time", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		if dst.exit(90*time.Second, "after recovery stopped short of its target") == nil {
			t.Fatal("the instance manager exited cleanly after recovery stopped short of its target")
		}
		msg, err := os.ReadFile(filepath.Join(dst.root, "termination"))
		if err != nil || !strings.Contains(string(msg), "ends before the recovery target") {
			t.Fatalf("termination message %q (%v), want it to say the archive ends before the target", msg, err)
		}
		if entries, _ := os.ReadDir(filepath.Join(dst.root, "data")); len(entries) != 0 {
			t.Fatalf("the refused recovery left %d entries in the data directory", len(entries))
		}
	})

	// Retention: a second base backup, more rows, then b1 pruned with the
	// WAL only it needed. The base backup left restores to the archive's end.
	if _, err := wal.TakeBase(ctx, src, st, "orders/", "b2", keys); err != nil {
		t.Fatal(err)
	}
	in.exec(ctx, "INSERT INTO events (id) SELECT generate_series(301, 400)")
	last = in.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, func() bool {
		_, err := st.Size(ctx, wal.Key("orders/", last))
		return err == nil
	}, last+" archived")
	bases, segments, err := wal.PruneArchive(ctx, st, "orders/", []string{"b1"})
	if err != nil || bases != 1 || segments == 0 {
		t.Fatalf("pruning b1: %d base backups and %d segments deleted, %v; want 1 and some", bases, segments, err)
	}
	t.Logf("pruned b1: %d segments went with it", segments)
	testpg.ChownToRunner(t, root)
	t.Run("the retained base backup to the archive's end", func(t *testing.T) {
		dst := newInstance(t)
		dst.extraFlags = []string{"--from-backup", "--restore-physical", "--restore-path", root, "--restore-prefix", "orders",
			"--" + instanceapi.FlagRestoreID, "b2"}
		dst.env = append(dst.env, backup.SeriesKeyEnv+"="+string(keys.Seal), backup.EncryptionKeyEnv+"="+string(keys.Encrypt))
		dst.start("copy-0")
		dst.waitReady(90 * time.Second)
		if got := dst.query(ctx, "SELECT count(*) || ':' || max(id) FROM events"); got != "400:400" {
			t.Fatalf("restored b2 to the end: rows %s, want 400:400", got)
		}
	})

	// A flipped byte in the stored base backup is refused.
	blob := filepath.Join(root, "orders", "base", "b2", "base.tar.zst")
	b2, err := wal.FindBase(ctx, st, "orders/", "b2", keys)
	if err != nil {
		t.Fatal(err)
	}
	testpg.FlipByte(t, blob, blob)
	if err := wal.ExtractBase(ctx, st, "orders/", b2, t.TempDir(), keys); err == nil {
		t.Fatal("a corrupted base backup was extracted")
	} else {
		t.Logf("corrupted base backup refused: %v", err)
	}
}

// pgbenchLoad runs pgbench's TPC-B-like load as the application owner
// until the returned function stops it (within 5 minutes in any case) and
// says how many transactions it committed.
func pgbenchLoad(t *testing.T, in *instance) (stop func() int) {
	t.Helper()
	bench := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(testpg.BinDir(t), "pgbench"), append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(in.pgPort),
			"-U", "shop"}, append(args, "orders")...)...)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+appPassword)
		return cmd
	}
	if out, err := bench("-i", "-q", "-s", "2").CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v: %s", err, out)
	}
	cmd := bench("-n", "-c", "2", "-T", "300")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		select {
		case err := <-done:
			t.Fatalf("pgbench ended before it was stopped: %v: %s", err, out.String())
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-done
		n, _ := strconv.Atoi(in.query(context.Background(), "SELECT count(*)::text FROM pgbench_history"))
		return n
	}
	t.Cleanup(func() { stop() })
	return stop
}
