package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
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

// A primary told to archive does so through its manager: PostgreSQL's
// archive_command asks the manager, which ships each finished segment
// compressed to the archive, where it reads back whole. The archive is
// claimed for its cluster: another cluster is refused.
func TestPrimaryArchivesWALThroughItsManager(t *testing.T) {
	t.Parallel()
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
		if err := wal.Fetch(ctx, st, "orders/", name, dest, backup.Keys{}); err != nil {
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

	// The archive names its cluster. Another cluster (a Database made
	// again under the same name: a new initdb) told to archive there ships
	// nothing, and says why.
	claim, err := os.ReadFile(filepath.Join(archive, "orders", "archive.json"))
	sysid := in.superuser("SELECT system_identifier FROM pg_control_system()")
	if err != nil || !strings.Contains(string(claim), `"systemIdentifier":"`+sysid+`"`) {
		t.Fatalf("archive.json = %s (%v), want system identifier %s", claim, err, sysid)
	}
	in.stop()
	other := newInstance(t)
	testpg.ChownToRunner(t, archive)
	other.writeFile("config/"+instanceapi.ArchiveFile, `{"directory":"`+archive+`","prefix":"orders/"}`)
	other.start("orders-0")
	other.waitReady(90 * time.Second)
	other.superuser("SELECT pg_switch_wal()")
	eventually(t, 30*time.Second, func() bool {
		s := other.status().Archive
		return s != nil && s.Failed > 0 && strings.Contains(s.LastError, "another PostgreSQL cluster") && s.Archived == 0
	}, "the other cluster refusing the archive")
	t.Logf("refused: %s", other.status().Archive.LastError)
	after, err := st.List(ctx, "orders/wal/")
	if err != nil || len(after) != len(keys) {
		t.Fatalf("the archive holds %d files after the other cluster ran, want %d (%v)", len(after), len(keys), err)
	}
}

// A replica archives the WAL it receives (archive_mode = always), so a
// primary that dies before it shipped its last segments leaves no gap:
// here the primary ships nothing at all, its replica ships every segment,
// and after the failover the new primary continues the archive on its new
// timeline, history file first. A base backup taken before the failover
// then recovers to a time after it, across the timeline switch.
func TestArchiveHasNoGapAfterAFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	archive := t.TempDir()
	// The managers write WAL as the runner, the test a base backup as itself.
	if err := os.MkdirAll(filepath.Join(archive, "orders", "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
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

	// A base backup from the replica before the failover, for the
	// recovery across it below. A standby's backup starts at its last
	// restartpoint: one in WAL it streamed, so archived.
	prim.superuser("CHECKPOINT")
	lsn := prim.superuser("SELECT pg_current_wal_lsn()")
	eventually(t, 30*time.Second, func() bool {
		return repl.superuser("SELECT pg_last_wal_replay_lsn() >= '"+lsn+"'::pg_lsn") == "t"
	}, "the replica replaying the checkpoint")
	repl.superuser("CHECKPOINT")
	primary := backup.Conn{Host: "127.0.0.1", Port: prim.pgPort, User: "streaming_replica", Password: "repl-secret", Database: "postgres"}
	src := wal.Source{Host: "127.0.0.1", Port: repl.pgPort, User: "streaming_replica", Password: "repl-secret", BinDir: testpg.BinDir(t),
		SwitchWAL: func(ctx context.Context) error {
			_, err := backup.Check(ctx, primary, "SELECT pg_switch_wal()")
			return err
		}}
	if _, err := wal.TakeBase(ctx, src, st, "orders/", "before-failover", backup.Keys{}); err != nil {
		t.Fatal(err)
	}
	// Logical backups read the roles' password verifiers as the
	// replication role, in database postgres.
	if _, err := backup.Check(ctx, primary, "SELECT count(rolpassword) FROM pg_authid"); err != nil {
		t.Fatalf("the replication role cannot read pg_authid: %v", err)
	}

	prim.stop()
	lt.transfer("orders-1")
	if code := promote(t, repl, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	repl.exec(ctx, "INSERT INTO items VALUES (5000, 'after the failover')")
	time.Sleep(1100 * time.Millisecond)
	target := repl.query(ctx, `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`)
	time.Sleep(1100 * time.Millisecond)
	repl.exec(ctx, "INSERT INTO items VALUES (6000, 'after the target')")
	next := repl.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	if !strings.HasPrefix(next, "00000002") {
		t.Fatalf("the new primary switched %s, want a segment of timeline 2", next)
	}
	eventually(t, 30*time.Second, archived("00000002.history", next), "the new primary archiving its timeline's history and "+next)
	for _, name := range append(old, "00000002.history", next) {
		if err := wal.Fetch(ctx, st, "orders/", name, filepath.Join(t.TempDir(), "f"), backup.Keys{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	// Point-in-time recovery across the failover: from the base backup of
	// timeline 1 to a time on timeline 2, through its history file.
	testpg.ChownToRunner(t, archive)
	dst := newInstance(t)
	dst.extraFlags = []string{"--from-backup", "--restore-physical", "--restore-path", archive, "--restore-prefix", "orders",
		"--recovery-target-time", target}
	dst.start("copy-0")
	dst.waitReady(90 * time.Second)
	if got := dst.query(ctx, "SELECT count(*) FILTER (WHERE id = 5000) || ':' || count(*) FILTER (WHERE id = 6000) || ':' || count(*) FILTER (WHERE id BETWEEN 1000 AND 1029) FROM items"); got != "1:0:30" {
		t.Fatalf("recovered across the failover to %s: rows (5000, 6000, before) = %s, want 1:0:30", target, got)
	}
	if tl := dst.superuser("SELECT timeline_id FROM pg_control_checkpoint()"); tl != "3" {
		t.Fatalf("the recovered copy is on timeline %s, want 3 (after the source's 2)", tl)
	}
}

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

// A storage outage of two minutes under pgbench load: the status reports
// the failure while the bucket is gone, WAL waits in pg_wal, and once it
// is back the archive catches up with no segment missing, proven by a
// recovery to the end of the archive that holds every event and every
// pgbench transaction committed before the last switch.
func TestArchivingCatchesUpAfterAStorageOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := testpg.StartMinIO(t)
	in := newInstance(t)
	in.writeFile("secrets/"+instanceapi.SecretArchiveAccessKeyID, m.AccessKey)
	in.writeFile("secrets/"+instanceapi.SecretArchiveSecretAccessKey, m.SecretKey)
	in.writeFile("config/"+instanceapi.ArchiveFile, `{"s3":{"endpoint":"`+m.Endpoint+`","bucket":"wal","insecure":true},"prefix":"orders/"}`)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	st, err := backup.NewS3(backup.S3Config{Endpoint: m.Endpoint, Bucket: "wal", Insecure: true, AccessKeyID: m.AccessKey, SecretAccessKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	src := wal.Source{Host: "127.0.0.1", Port: in.pgPort, User: "streaming_replica", Password: "repl-secret", BinDir: testpg.BinDir(t)}
	in.exec(ctx, "CREATE TABLE events (id int PRIMARY KEY)")
	if _, err := wal.TakeBase(ctx, src, st, "orders/", "b1", backup.Keys{}); err != nil {
		t.Fatal(err)
	}
	first := in.superuser("SELECT pg_walfile_name(pg_current_wal_lsn())")

	// Two minutes without storage, under pgbench load, with a batch of
	// events and a segment switch every 10 s.
	m.Stop()
	down := time.Now()
	stopLoad := pgbenchLoad(t, in)
	var last string
	reported := false
	for i := 0; i == 0 || time.Since(down) < outage(); i++ {
		in.exec(ctx, fmt.Sprintf("INSERT INTO events SELECT generate_series(%d, %d)", 1000*i+1, 1000*i+1000))
		last = in.superuser("SELECT pg_walfile_name(pg_switch_wal())")
		if s := in.status().Archive; !reported && s != nil && s.LastError != "" && s.Failed > 0 && s.Pending > 0 &&
			s.PendingBytes >= 16<<20 && s.VolumeFreeBytes > 0 {
			reported = true
			t.Logf("%s into the outage: %+v", time.Since(down).Round(time.Second), *s)
		}
		time.Sleep(10 * time.Second)
	}
	loaded := stopLoad()
	last = in.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	events := in.query(ctx, "SELECT count(*)::text FROM events")
	if !reported {
		t.Fatalf("in %s of outage the status never reported the failing archive and the WAL waiting: %+v", outage(), in.status().Archive)
	}
	t.Logf("after %s: %+v; %d pgbench transactions, %s events", time.Since(down).Round(time.Second), *in.status().Archive, loaded, events)
	m.Start(t)

	took := time.Now()
	eventually(t, 90*time.Second, func() bool {
		s := in.status().Archive
		return s != nil && s.LastError == "" && s.LastArchived >= last
	}, "the archive catching up to "+last)
	t.Logf("caught up %s after the storage came back", time.Since(took).Round(100*time.Millisecond))
	keys, err := st.List(ctx, "orders/wal/")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, k := range keys {
		stored[strings.TrimSuffix(filepath.Base(k), ".zst")] = true
	}
	for seg := first; seg <= last; seg = wal.NextSegment(seg, 0) {
		if !stored[seg] {
			t.Fatalf("segment %s is missing from the archive (%s to %s)", seg, first, last)
		}
	}

	dst := newInstance(t)
	dst.env = []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
	dst.extraFlags = []string{"--from-backup", "--restore-physical", "--restore-s3-endpoint", m.Endpoint, "--restore-s3-bucket", "wal",
		"--restore-s3-insecure", "--restore-prefix", "orders"}
	dst.start("copy-0")
	dst.waitReady(90 * time.Second)
	if got := dst.query(ctx, "SELECT count(*)::text FROM events"); got != events {
		t.Fatalf("recovered to the end of the archive: %s events, want %s", got, events)
	}
	if got := dst.query(ctx, "SELECT count(*)::text FROM pgbench_history"); got != strconv.Itoa(loaded) {
		t.Fatalf("recovered to the end of the archive: %s pgbench transactions, want %d", got, loaded)
	}
}

// outage is how long TestArchivingCatchesUpAfterAStorageOutage keeps the
// storage down: 2 minutes, or DAYTWO_OUTAGE_SECONDS for a quicker local run.
func outage() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("DAYTWO_OUTAGE_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 2 * time.Minute
}

// archivingPair is linkedPair with both instances archiving WAL into a
// directory, under the prefix "orders/".
func (lt *leaseTest) archivingPair() (prim, repl *instance, link *proxy, archive string) {
	archive = lt.t.TempDir()
	if err := os.MkdirAll(filepath.Join(archive, "orders", "wal"), 0o755); err != nil {
		lt.t.Fatal(err)
	}
	testpg.ChownToRunner(lt.t, archive)
	prim, repl, link = lt.linkedPairWith(nil, func(prim, repl *instance) {
		for _, in := range []*instance{prim, repl} {
			in.writeFile("config/"+instanceapi.ArchiveFile, `{"directory":"`+archive+`","prefix":"orders/"}`)
		}
	})
	return prim, repl, link, archive
}

// A base backup taken from a streaming replica, sparing the primary: it
// ends once the segment of its stop point is archived, which needs the
// primary to finish that segment (asked every few seconds, as the backup
// Job does), and it restores like one taken from the primary.
func TestBaseBackupFromAReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	prim, repl, _, root := lt.archivingPair()
	st := backup.NewDir(root)
	prim.exec(ctx, "INSERT INTO items SELECT g, 'before' FROM generate_series(1000, 1099) g")
	primary := backup.Conn{Host: "127.0.0.1", Port: prim.pgPort, User: "streaming_replica", Password: "repl-secret", Database: "postgres"}
	switches := 0
	src := wal.Source{Host: "127.0.0.1", Port: repl.pgPort, User: "streaming_replica", Password: "repl-secret", BinDir: testpg.BinDir(t),
		SwitchWAL: func(ctx context.Context) error {
			switches++
			_, err := backup.Check(ctx, primary, "SELECT pg_switch_wal()")
			return err
		}}
	start := time.Now()
	b, err := wal.TakeBase(ctx, src, st, "orders/", "from-replica", backup.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("base backup from the replica in %s (%d switches asked): %+v", time.Since(start).Round(100*time.Millisecond), switches, b)
	testpg.ChownToRunner(t, root)

	prim.exec(ctx, "INSERT INTO items SELECT g, 'after' FROM generate_series(2000, 2099) g")
	want := prim.query(ctx, "SELECT count(*)::text FROM items")
	last := prim.superuser("SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 30*time.Second, func() bool {
		_, err := st.Size(ctx, wal.Key("orders/", last))
		return err == nil
	}, last+" archived")
	dst := newInstance(t)
	dst.extraFlags = []string{"--from-backup", "--restore-physical", "--restore-path", root, "--restore-prefix", "orders", "--restore-id", "from-replica"}
	dst.start("copy-0")
	dst.waitReady(90 * time.Second)
	if got := dst.query(ctx, "SELECT count(*)::text FROM items"); got != want {
		t.Fatalf("restored %s rows, want %s", got, want)
	}
}
