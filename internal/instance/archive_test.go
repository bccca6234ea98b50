package instance_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
	t.Logf("after %s: %+v; %d pgbench transactions, %s events", time.Since(down).Round(time.Second), in.status().Archive, loaded, events)
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
