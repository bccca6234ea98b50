//go:build bench

package backup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

var ctx = context.Background()

func benchMB() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_MB")); err == nil && n > 0 {
		return n
	}
	return 1024
}

// timed runs f and returns its duration, failing the benchmark on error.
func timed(t *testing.T, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	took := time.Since(start)
	t.Logf("%-34s %8.2fs", what, took.Seconds())
	return took
}

func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func TestBenchBackup(t *testing.T) {
	mb := benchMB()
	pg := testpg.Start(t, "max_wal_size=4GB", "shared_buffers=256MB", "archive_mode=on", "archive_command=/bin/true")
	minio, ca := testpg.StartMinIOTLS(t)
	t.Setenv("SSL_CERT_FILE", ca) // daytwo's S3 client trusts the test CA like any system CA

	// About BENCH_MB of data: pgbench accounts (15MB per scale unit), which
	// compress about 50:1, so the figures are mostly pg_dump/pg_restore CPU.
	// BENCH_DATA=random fills it with incompressible bytes instead, so the
	// dump is as big as the data and the S3 path carries it all.
	pg.Exec(t, "postgres", "CREATE DATABASE bench")
	if os.Getenv("BENCH_DATA") == "random" {
		rows := mb * 1000000 / 200 // ~200 bytes per row on disk
		timed(t, fmt.Sprintf("seed (%d rows of random bytes)", rows), func() error {
			pg.Exec(t, "bench", `CREATE TABLE noise AS SELECT g AS id,
				decode(md5(random()::text) || md5(random()::text) || md5(random()::text) || md5(random()::text) ||
				       md5(random()::text) || md5(random()::text) || md5(random()::text) || md5(random()::text), 'hex') AS v
				FROM generate_series(1, $1::int) g`, rows)
			pg.Exec(t, "bench", "CREATE TABLE pgbench_accounts AS SELECT id AS aid, 0 AS abalance FROM noise WHERE id <= 1000")
			return nil
		})
	} else {
		scale := max(1, mb/15)
		timed(t, fmt.Sprintf("seed (pgbench -i -s %d)", scale), func() error {
			cmd := exec.Command(filepath.Join(pg.BinDir, "pgbench"), "-i", "-q", "-s", strconv.Itoa(scale), "bench")
			cmd.Env = pg.Env("bench")
			return run(cmd)
		})
	}
	sizeMB, _ := strconv.ParseFloat(pg.Query(t, "bench", "SELECT pg_database_size('bench') / 1000000.0"), 64)
	t.Logf("database size: %.0f MB", sizeMB)
	mbps := func(d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return sizeMB / d.Seconds()
	}

	// daytwo: the same code path as `daytwo backup run` and the restore, to MinIO over TLS.
	st, err := backup.NewS3(backup.S3Config{Endpoint: "https://" + minio.Endpoint, Bucket: "bench",
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	opts := func(db string) backup.Options {
		return backup.Options{Conn: backup.Conn{Host: "127.0.0.1", Port: pg.Port, User: "postgres", Password: pg.Password, Database: db},
			Storage: st, Prefix: "bench/", BinDir: pg.BinDir}
	}
	// BENCH_ONLY=physical skips the logical half.
	logical := os.Getenv("BENCH_ONLY") != "physical"
	dumpFile := filepath.Join(t.TempDir(), "bench.dump")
	if logical {
		timed(t, "pg_dump -Fc to a local file", func() error {
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_dump"), "--format=custom", "--file="+dumpFile)
			cmd.Env = pg.Env("bench")
			return run(cmd)
		})
	}
	restoreFlags := []string{"--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction"}

	// Each measurement runs twice, alternating raw and daytwo, and the best
	// of each counts: the server's state (WAL, checkpoints, cache) then
	// favours neither side.
	var rawDump, daytwoBackup, rawRestore, daytwoRestore time.Duration
	var m backup.Manifest
	best := func(cur, d time.Duration) time.Duration {
		if cur == 0 || d < cur {
			return d
		}
		return cur
	}
	for round := 1; logical && round <= 2; round++ {
		rawDump = best(rawDump, timed(t, fmt.Sprintf("raw pg_dump -Fc > /dev/null (%d)", round), func() error {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer func() { _ = devnull.Close() }()
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_dump"), "--format=custom")
			cmd.Env, cmd.Stdout = pg.Env("bench"), devnull
			return cmd.Run()
		}))
		daytwoBackup = best(daytwoBackup, timed(t, fmt.Sprintf("daytwo backup to MinIO (%d)", round), func() error {
			m, err = backup.Run(ctx, opts("bench"), fmt.Sprintf("round-%d", round), "bench")
			return err
		}))
		db := fmt.Sprintf("raw_restore_%d", round)
		pg.Exec(t, "postgres", "CREATE DATABASE "+db)
		rawRestore = best(rawRestore, timed(t, fmt.Sprintf("raw pg_restore from a local file (%d)", round), func() error {
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_restore"), append(restoreFlags, "--dbname="+db, dumpFile)...)
			cmd.Env = pg.Env(db)
			return run(cmd)
		}))
		pg.Exec(t, "postgres", "DROP DATABASE "+db)
		db = fmt.Sprintf("daytwo_restore_%d", round)
		pg.Exec(t, "postgres", "CREATE DATABASE "+db)
		daytwoRestore = best(daytwoRestore, timed(t, fmt.Sprintf("daytwo restore from MinIO (%d)", round), func() error {
			_, err := backup.Restore(ctx, opts(db), m.ID, "")
			return err
		}))
		if round == 1 {
			if a, b := pg.Query(t, "bench", "SELECT sum(abalance) || ':' || count(*) FROM pgbench_accounts"),
				pg.Query(t, db, "SELECT sum(abalance) || ':' || count(*) FROM pgbench_accounts"); a != b {
				t.Fatalf("restored data differs: %s vs %s", b, a)
			}
		}
		pg.Exec(t, "postgres", "DROP DATABASE "+db)
	}

	// Physical: the whole cluster, raw pg_basebackup to /dev/null (the
	// floor), daytwo's base backup to MinIO and its extraction, against
	// pgBackRest's full backup and restore on the same MinIO. The rates
	// count the whole cluster each copies.
	clusterMB, _ := strconv.ParseFloat(pg.Query(t, "postgres", "SELECT sum(pg_database_size(datname)) / 1000000.0 FROM pg_database"), 64)
	clusterMBps := func(d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return clusterMB / d.Seconds()
	}
	src := wal.Source{Host: "127.0.0.1", Port: pg.Port, User: "postgres", Password: pg.Password, BinDir: pg.BinDir}
	var rawBase, daytwoBase, daytwoExtract time.Duration
	var base wal.BaseBackup
	for round := 1; round <= 2; round++ {
		rawBase = best(rawBase, timed(t, fmt.Sprintf("raw pg_basebackup -Ft -D - > /dev/null (%d)", round), func() error {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer func() { _ = devnull.Close() }()
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(pg.Port), "-U", "postgres",
				"-D", "-", "-F", "tar", "-X", "none", "--checkpoint=fast", "--manifest-checksums=NONE")
			cmd.Env, cmd.Stdout = append(os.Environ(), "PGPASSWORD="+pg.Password), devnull
			return cmd.Run()
		}))
		daytwoBase = best(daytwoBase, timed(t, fmt.Sprintf("daytwo base backup to MinIO (%d)", round), func() error {
			base, err = wal.TakeBase(ctx, src, st, "physical/", fmt.Sprintf("base-%d", round))
			return err
		}))
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		daytwoExtract = best(daytwoExtract, timed(t, fmt.Sprintf("daytwo base backup restore (%d)", round), func() error {
			return wal.ExtractBase(ctx, st, "physical/", base, dir)
		}))
	}
	// pgBackRest twice: as installed (one process, gzip level 6), and
	// tuned for this machine (a process per core, zstd); the faster one is
	// the peer.
	peer, peerRestore := pgbackrest(t, pg, minio, ca, "default", "")
	tuned, tunedRestore := pgbackrest(t, pg, minio, ca, "tuned", "process-max=2\ncompress-type=zst\n")
	if tuned > 0 && tuned < peer {
		peer = tuned
	}
	if tunedRestore > 0 && tunedRestore < peerRestore {
		peerRestore = tunedRestore
	}

	var backupRatio, restoreRatio float64
	if logical {
		backupRatio, restoreRatio = rawDump.Seconds()/daytwoBackup.Seconds(), rawRestore.Seconds()/daytwoRestore.Seconds()
	}
	fmt.Printf("\n%-42s %10s %10s\n", "", "seconds", "MB/s")
	for _, row := range []struct {
		name string
		d    time.Duration
	}{{"raw pg_dump -Fc > /dev/null (best of 2)", rawDump}, {"daytwo backup -> MinIO (best of 2)", daytwoBackup},
		{"raw pg_restore <- local file (best of 2)", rawRestore}, {"daytwo restore <- MinIO (best of 2)", daytwoRestore}} {
		fmt.Printf("%-42s %10.2f %10.1f\n", row.name, row.d.Seconds(), mbps(row.d))
	}
	fmt.Printf("physical, whole cluster (%.0f MB):\n", clusterMB)
	for _, row := range []struct {
		name string
		d    time.Duration
	}{{"raw pg_basebackup -Ft > /dev/null (best of 2)", rawBase}, {"daytwo base backup -> MinIO (best of 2)", daytwoBase},
		{"daytwo base restore <- MinIO (best of 2)", daytwoExtract}, {"pgBackRest backup -> MinIO (full, best config)", peer},
		{"pgBackRest restore <- MinIO (best config)", peerRestore}} {
		if row.d > 0 {
			fmt.Printf("%-42s %10.2f %10.1f\n", row.name, row.d.Seconds(), clusterMBps(row.d))
		}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	physicalRatio := ratio(clusterMBps(daytwoBase), clusterMBps(peer))
	physicalRestoreRatio := ratio(clusterMBps(daytwoExtract), clusterMBps(peerRestore))
	fmt.Printf("logical: backup ratio daytwo/raw %.2f, restore ratio daytwo/raw %.2f (goal >= 0.9); dump %d bytes compressed\n",
		backupRatio, restoreRatio, m.Bytes)
	fmt.Printf("physical: daytwo/pgBackRest backup %.2f (goal >= 2), restore %.2f (goal >= 1.5); daytwo/raw pg_basebackup %.2f; base %d bytes stored\n",
		physicalRatio, physicalRestoreRatio, ratio(clusterMBps(daytwoBase), clusterMBps(rawBase)), base.Size)
	fmt.Printf("BENCH backup mb=%d dump_mbps=%.1f backup_mbps=%.1f backup_ratio=%.2f restore_raw_mbps=%.1f restore_mbps=%.1f restore_ratio=%.2f "+
		"basebackup_raw_mbps=%.1f physical_mbps=%.1f pgbackrest_mbps=%.1f physical_ratio=%.2f pitr_restore_mbps=%.1f pgbackrest_restore_mbps=%.1f physical_restore_ratio=%.2f\n",
		int(sizeMB), mbps(rawDump), mbps(daytwoBackup), backupRatio, mbps(rawRestore), mbps(daytwoRestore), restoreRatio,
		clusterMBps(rawBase), clusterMBps(daytwoBase), clusterMBps(peer), physicalRatio, clusterMBps(daytwoExtract), clusterMBps(peerRestore), physicalRestoreRatio)
}

// pgbackrest runs a full pgBackRest backup of pg's cluster to MinIO and a
// restore of it into an empty directory, and returns how long each took (0
// when pgBackRest is not installed: said, not hidden).
// name labels the run and its repository; extra is more [global] settings.
func pgbackrest(t *testing.T, pg *testpg.Server, minio *testpg.MinIO, ca, name, extra string) (backup, restore time.Duration) {
	bin, err := exec.LookPath("pgbackrest")
	if err != nil {
		t.Logf("pgBackRest is not installed (make bench-backup installs it): no peer figure")
		return 0, 0
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "pgbackrest.conf")
	// pgBackRest matches the certificate's DNS names only.
	_, port, _ := strings.Cut(minio.Endpoint, ":")
	host := "localhost"
	content := fmt.Sprintf(`[global]
repo1-type=s3
repo1-path=/pgbackrest-%s
repo1-s3-bucket=bench
repo1-s3-endpoint=%s
repo1-storage-port=%s
repo1-s3-region=us-east-1
repo1-s3-uri-style=path
repo1-s3-key=%s
repo1-s3-key-secret=%s
repo1-storage-ca-file=%s
repo1-retention-full=1
start-fast=y
archive-check=n
log-level-console=warn
log-path=%s
lock-path=%s
spool-path=%s
%s
[bench]
pg1-path=%s
pg1-port=%d
pg1-socket-path=%s
pg1-user=postgres
`, name, host, port, minio.AccessKey, minio.SecretKey, ca, dir, dir, dir, extra, filepath.Join(pg.Dir, "data"), pg.Port, pg.Dir)
	if err := os.WriteFile(conf, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, dir)
	cmd := func(args ...string) *exec.Cmd {
		c := exec.Command(bin, append([]string{"--config=" + conf, "--stanza=bench"}, args...)...)
		c.SysProcAttr = testpg.RunnerCredential(t)
		c.Env = append(os.Environ(), "PGPASSWORD="+pg.Password)
		return c
	}
	timed(t, "pgBackRest stanza-create ("+name+")", func() error { return run(cmd("stanza-create")) })
	backup = timed(t, "pgBackRest full backup to MinIO ("+name+")", func() error { return run(cmd("--type=full", "backup")) })
	target := filepath.Join(dir, "restored")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, target)
	restore = timed(t, "pgBackRest restore from MinIO ("+name+")", func() error { return run(cmd("--pg1-path="+target, "restore")) })
	return backup, restore
}
