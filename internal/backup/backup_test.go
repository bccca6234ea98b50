package backup_test

// Data-path tests against real servers on loopback: PostgreSQL (testpg.BinDir)
// and MinIO (make deps provides both).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

var ctx = context.Background()

// checksum summarises the seeded data: row counts and content hashes.
const checksum = `SELECT (SELECT count(*) FROM pgbench_accounts) || ':' || (SELECT sum(abalance) FROM pgbench_accounts) || ':' ||
	(SELECT count(*) FROM events) || ':' || (SELECT sum(hashtext(payload)::bigint) FROM events)`

func scale() int {
	if n, err := strconv.Atoi(os.Getenv("DAYTWO_BACKUP_TEST_SCALE")); err == nil && n > 0 {
		return n
	}
	return 10
}

// seed fills database db with pgbench data at scale and an events table of
// 200,000 rows per scale unit.
func seed(t *testing.T, pg *testpg.Server, db string) {
	t.Helper()
	start := time.Now()
	pg.Exec(t, "postgres", "CREATE DATABASE "+db)
	pg.Pgbench(t, db, scale())
	pg.Exec(t, db, `CREATE TABLE events AS SELECT g AS id, md5(g::text) || repeat('x', 40) AS payload
		FROM generate_series(1, $1::int) g`, 200000*scale())
	pg.Exec(t, db, "UPDATE pgbench_accounts SET abalance = aid % 977")
	t.Logf("seeded scale %d in %s", scale(), time.Since(start).Round(time.Millisecond))
}

func s3(t *testing.T, m *testpg.MinIO, bucket string) backup.Storage {
	t.Helper()
	st, err := backup.NewS3(backup.S3Config{Endpoint: m.Endpoint, Bucket: bucket, AccessKeyID: m.AccessKey,
		SecretAccessKey: m.SecretKey, Insecure: true, PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	return st
}

// nightly is the series most tests back up into.
var nightly = backup.Series{UID: "uid-nightly", Name: "ns/orders-nightly", Database: "orders"}

func opts(pg *testpg.Server, db string, st backup.Storage) backup.Options {
	return backup.Options{Conn: backup.Conn{Host: "127.0.0.1", Port: pg.Port, User: "postgres", Password: pg.Password, Database: db},
		Storage: st, Prefix: "ns/orders/", Series: nightly, BinDir: pg.BinDir}
}

func TestBackupToMinIORestoresTheSameData(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	seed(t, pg, "shop")
	want := pg.Query(t, "shop", checksum)

	start := time.Now()
	m, err := backup.Run(ctx, opts(pg, "shop", st), backup.NewID(start), "test")
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	took := time.Since(start)
	t.Logf("backup %s: %d bytes in %s (%.1f MB/s), sha256 %s", m.ID, m.Bytes, took.Round(time.Millisecond),
		float64(m.Bytes)/1e6/took.Seconds(), m.SHA256[:12])
	if m.Bytes == 0 || len(m.SHA256) != 64 || !strings.HasPrefix(m.PGVersion, testpg.Major(t)+".") {
		t.Fatalf("manifest = %+v", m)
	}

	pg.Exec(t, "postgres", "CREATE DATABASE restored")
	start = time.Now()
	got, err := backup.Restore(ctx, opts(pg, "restored", st), "", "")
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("restore of %s took %s", got.ID, time.Since(start).Round(time.Millisecond))
	if after := pg.Query(t, "restored", checksum); after != want {
		t.Fatalf("restored checksum %s, want %s", after, want)
	}
}

// failingStorage kills MinIO once bytes have passed through an upload.
type failingStorage struct {
	backup.Storage
	after int64
	kill  func()
	once  sync.Once
}

func (f *failingStorage) Put(ctx context.Context, key string, r io.Reader) error {
	return f.Storage.Put(ctx, key, &hookReader{r: r, after: f.after, hook: func() { f.once.Do(f.kill) }})
}

type hookReader struct {
	r     io.Reader
	n     int64
	after int64
	hook  func()
}

func (h *hookReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if h.n += int64(n); h.n > h.after {
		h.hook()
	}
	return n, err
}

func TestMinIODyingMidUploadLeavesNoBackup(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	// About 25MB of poorly compressible data: several 5MB parts.
	pg.Exec(t, "postgres", "CREATE DATABASE shop")
	pg.Exec(t, "shop", "CREATE TABLE noise AS SELECT g, md5(random()::text) || md5(random()::text) AS v FROM generate_series(1, 400000) g")

	broken := &failingStorage{Storage: st, after: 6 << 20, kill: minio.Stop}
	_, err := backup.Run(ctx, opts(pg, "shop", broken), "20260101T000000Z", "test")
	if err == nil {
		t.Fatal("the backup succeeded although MinIO died during the upload")
	}
	t.Logf("failed as it should: %v", err)

	minio.Start(t)
	if list, err := backup.List(ctx, st, "ns/orders/", nightly); err != nil || len(list) != 0 {
		t.Fatalf("after the failure: %d backups, %v", len(list), err)
	}
	m, err := backup.Run(ctx, opts(pg, "shop", st), "20260101T000100Z", "test")
	if err != nil {
		t.Fatalf("retry after MinIO came back: %v", err)
	}
	if list, _ := backup.List(ctx, st, "ns/orders/", nightly); len(list) != 1 || list[0].ID != m.ID {
		t.Fatalf("after the retry: %+v", list)
	}
}

func TestCorruptBackupIsRefused(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	pg.Exec(t, "postgres", "CREATE DATABASE small")
	pg.Exec(t, "small", "CREATE TABLE t AS SELECT g, md5(g::text) AS v FROM generate_series(1, 50000) g")
	m, err := backup.Run(ctx, opts(pg, "small", st), "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	// Flip one byte in the middle of the stored dump.
	rc, err := st.Get(ctx, m.DataKey)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	data[len(data)/2] ^= 0x01
	if err := st.Put(ctx, m.DataKey, strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, "postgres", "CREATE DATABASE target")
	_, err = backup.Restore(ctx, opts(pg, "target", st), m.ID, "")
	if !errors.Is(err, backup.ErrChecksum) {
		t.Fatalf("restore of a corrupt backup: %v, want a checksum error", err)
	}
	t.Logf("refused: %v", err)
	if n := pg.Query(t, "target", "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"); n != "0" {
		t.Fatalf("the refused restore left %s tables behind", n)
	}
}

func TestRetentionKeepsTheNewestInTheBucket(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	pg.Exec(t, "postgres", "CREATE DATABASE small")
	pg.Exec(t, "small", "CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g")
	var ids []string
	for i := range 5 {
		id := backup.NewID(time.Date(2026, 1, 1, i, 0, 0, 0, time.UTC))
		if _, err := backup.Run(ctx, opts(pg, "small", st), id, "test"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if _, _, err := backup.Prune(ctx, st, "ns/orders/", nightly, backup.Retention{KeepLast: 3}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := st.List(ctx, "ns/orders/")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := backup.List(ctx, st, "ns/orders/", nightly)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{}
	for i, m := range kept {
		if m.ID != ids[len(ids)-1-i] {
			t.Fatalf("kept %s, want %s", m.ID, ids[len(ids)-1-i])
		}
		want = append(want, m.DataKey, m.Roles.Key, "ns/orders/"+m.ID+".uid-nightly.manifest.json")
	}
	slices.Sort(want)
	if len(kept) != 3 || strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("bucket holds %v, want %v", keys, want)
	}
}

func TestDirectoryStorage(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	pg.Exec(t, "postgres", "CREATE DATABASE small")
	pg.Exec(t, "small", "CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g")
	st := backup.NewDir(t.TempDir())
	m, err := backup.Run(ctx, opts(pg, "small", st), "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, "postgres", "CREATE DATABASE copy")
	if _, err := backup.Restore(ctx, opts(pg, "copy", st), m.ID, ""); err != nil {
		t.Fatal(err)
	}
	if n := pg.Query(t, "copy", "SELECT count(*) FROM t"); n != "1000" {
		t.Fatalf("restored %s rows", n)
	}
}

// Series that share a bucket and prefix, even on the same schedule (the
// same backup IDs), never list, prune or restore each other's backups; nor
// does a Snapshot deletion's final backup (keepLast 1) beside a nightly series.
func TestSeriesSharingALocationStayApart(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	pg.Exec(t, "postgres", "CREATE DATABASE orders")
	pg.Exec(t, "orders", "CREATE TABLE t AS SELECT g FROM generate_series(1, 100) g")
	pg.Exec(t, "postgres", "CREATE DATABASE billing")
	pg.Exec(t, "billing", "CREATE TABLE t AS SELECT g FROM generate_series(1, 7) g")

	other := backup.Series{UID: "uid-billing", Name: "ns/billing-nightly", Database: "billing"}
	final := backup.Series{UID: "uid-final", Name: "ns/orders-final", Database: "orders"}
	billing := opts(pg, "billing", st)
	billing.Series = other
	for i := range 3 {
		id := backup.NewID(time.Date(2026, 1, 1, i, 0, 0, 0, time.UTC))
		for _, o := range []backup.Options{opts(pg, "orders", st), billing} {
			if _, err := backup.Run(ctx, o, id, "test"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := backup.Prune(ctx, st, o.Prefix, o.Series, backup.Retention{KeepLast: 5}); err != nil {
				t.Fatal(err)
			}
		}
	}
	snapshot := opts(pg, "orders", st)
	snapshot.Series = final
	if _, err := backup.Run(ctx, snapshot, backup.NewID(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)), "test"); err != nil {
		t.Fatal(err)
	}
	if _, pruned, err := backup.Prune(ctx, st, "ns/orders/", final, backup.Retention{KeepLast: 1}); err != nil || pruned != 0 {
		t.Fatalf("the final backup's retention pruned %d: %v", pruned, err)
	}
	for _, s := range []struct {
		series backup.Series
		want   int
	}{{nightly, 3}, {other, 3}, {final, 1}} {
		list, err := backup.List(ctx, st, "ns/orders/", s.series)
		if err != nil || len(list) != s.want {
			t.Fatalf("series %s lists %d backups, want %d: %v", s.series.Name, len(list), s.want, err)
		}
		for _, m := range list {
			if m.Series != s.series.UID || m.Database != s.series.Database {
				t.Fatalf("series %s lists %+v", s.series.Name, m)
			}
		}
	}
	// The same ID restores each series' own data (into a new server: a
	// backup holds every database, and a restore overwrites none).
	dst := testpg.Start(t)
	dst.Exec(t, "postgres", "CREATE DATABASE copy")
	restore := opts(dst, "copy", st)
	restore.Series = other
	if _, err := backup.Restore(ctx, restore, backup.NewID(time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)), ""); err != nil {
		t.Fatal(err)
	}
	if n := dst.Query(t, "copy", "SELECT count(*) FROM t"); n != "7" {
		t.Fatalf("restored %s rows of billing, want 7", n)
	}
}

// rejectingStorage fails every upload once some bytes have arrived, as a
// network cut would, with the server still up.
type rejectingStorage struct{ backup.Storage }

func (r rejectingStorage) Put(ctx context.Context, key string, rd io.Reader) error {
	if strings.HasSuffix(key, ".manifest.json") {
		return r.Storage.Put(ctx, key, rd)
	}
	_, _ = io.CopyN(io.Discard, rd, 1024)
	return errors.New("connection reset")
}

// A Job's retry of a backup ID that is stored already only prunes; a failed
// retry never deletes what an earlier attempt stored.
func TestRetriedBackupKeepsTheEarlierAttempt(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	pg.Exec(t, "postgres", "CREATE DATABASE small")
	pg.Exec(t, "small", "CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g")
	first, err := backup.Run(ctx, opts(pg, "small", st), "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	again, err := backup.Run(ctx, opts(pg, "small", rejectingStorage{st}), "20260101T000000Z", "test")
	if err != nil || again.DataKey != first.DataKey || again.SHA256 != first.SHA256 {
		t.Fatalf("the retry of a stored backup: %+v, %v", again, err)
	}
	// An attempt that fails halfway deletes only its own data.
	if _, err := backup.Run(ctx, opts(pg, "small", rejectingStorage{st}), "20260101T000100Z", "test"); err == nil {
		t.Fatal("an upload that was cut succeeded")
	}
	pg.Exec(t, "postgres", "CREATE DATABASE copy")
	if _, err := backup.Restore(ctx, opts(pg, "copy", st), first.ID, ""); err != nil {
		t.Fatalf("the first attempt's backup no longer restores: %v", err)
	}
	if n := pg.Query(t, "copy", "SELECT count(*) FROM t"); n != "1000" {
		t.Fatalf("restored %s rows", n)
	}
}

// What pg_dump wrote is checked before a manifest makes it a backup.
func TestNotAnArchiveIsNotABackup(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	st := backup.NewDir(t.TempDir())
	bin := t.TempDir()
	fake := "#!/bin/sh\necho 'pg_dump: warning: something odd'\n"
	if err := os.WriteFile(filepath.Join(bin, "pg_dump"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(pg.BinDir, "pg_dumpall"), filepath.Join(bin, "pg_dumpall")); err != nil {
		t.Fatal(err)
	}
	o := opts(pg, "postgres", st)
	o.BinDir = bin
	_, err := backup.Run(ctx, o, "20260101T000000Z", "test")
	if err == nil || !strings.Contains(err.Error(), "not a custom-format archive") {
		t.Fatalf("a dump without the archive header: %v", err)
	}
	if list, _ := backup.List(ctx, st, "ns/orders/", nightly); len(list) != 0 {
		t.Fatalf("it was stored as a backup: %+v", list)
	}
	if keys, _ := st.List(ctx, ""); len(keys) != 0 {
		t.Fatalf("it left %v behind", keys)
	}
}

// A table lock held by a long migration fails the backup after the lock
// wait timeout instead of blocking the schedule for good.
func TestBackupGivesUpOnALockedTable(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	pg.Exec(t, "postgres", "CREATE DATABASE small")
	pg.Exec(t, "small", "CREATE TABLE t AS SELECT g FROM generate_series(1, 10) g")
	conn, err := pg.Connect(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	o := opts(pg, "small", backup.NewDir(t.TempDir()))
	o.LockWaitTimeout = time.Second
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	_, err = backup.Run(runCtx, o, "20260101T000000Z", "test")
	if err == nil || runCtx.Err() != nil {
		t.Fatalf("backup of a locked table: %v after %s", err, time.Since(start))
	}
	t.Logf("gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// Create is a conditional write on both storages: of writers racing for
// one key exactly one wins, the others get ErrExists, and the stored
// object is the winner's (a promotion claim relies on it).
func TestCreateIsWonOnce(t *testing.T) {
	t.Parallel()
	minio := testpg.StartMinIO(t)
	for name, st := range map[string]backup.Storage{"s3": s3(t, minio, "claims"), "dir": backup.NewDir(t.TempDir())} {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { errs[i] = st.Create(context.Background(), "orders/promoted.json", []byte(strconv.Itoa(i))) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("%s: writers %d and %d both won", name, won, i)
			case !errors.Is(err, backup.ErrExists):
				t.Fatalf("%s: writer %d: %v", name, i, err)
			}
		}
		rc, err := st.Get(context.Background(), "orders/promoted.json")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		_ = rc.Close()
		if won < 0 || string(got) != strconv.Itoa(won) {
			t.Fatalf("%s: winner %d, stored %q", name, won, got)
		}
	}
}

// An object whose size is known (a WAL segment, a manifest) is stored in
// one request, not buffered as a multipart upload of unknown length: the
// instance manager archives every segment this way, and each upload once
// allocated two default parts (128 MiB) for a few MiB of WAL. Not
// parallel: it measures the process's allocations.
func TestPutOfKnownSizeBuffersNoParts(t *testing.T) {
	minio := testpg.StartMinIO(t)
	st, err := backup.NewS3(backup.S3Config{Endpoint: minio.Endpoint, Bucket: "segments", AccessKeyID: minio.AccessKey,
		SecretAccessKey: minio.SecretKey, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Repeat("0123456789abcdef", 1<<16)) // 1 MiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := st.Put(ctx, "wal/000000010000000000000001", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("storing 1 MiB allocated %d MiB", grew>>20)
	}
	if n, err := st.Size(ctx, "wal/000000010000000000000001"); err != nil || n != int64(len(data)) {
		t.Fatalf("stored %d bytes (%v), want %d", n, err, len(data))
	}
}
