//go:build bench

package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// busyCPU is the CPU time every process on the machine has spent so far
// (/proc/stat's first line: user, nice, system, irq and softirq, in
// USER_HZ ticks of 1/100 s; not idle, iowait or time stolen by a
// hypervisor): what a phase used is the difference across it. It counts
// anything else that runs meanwhile too, so benchmark on a quiet machine.
func busyCPU(t *testing.T) time.Duration {
	t.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatalf("read /proc/stat: %v", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	var ticks int64
	for i, f := range fields[1:min(len(fields), 9)] {
		if i == 3 || i == 4 || i == 7 { // idle, iowait, steal
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", line, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// timedCPU is timed, and also returns the CPU time the whole machine spent
// meanwhile (busyCPU).
func timedCPU(t *testing.T, what string, f func() error) (took, cpu time.Duration) {
	t.Helper()
	before := busyCPU(t)
	took = timed(t, what, f)
	return took, busyCPU(t) - before
}

func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func TestBenchBackup(t *testing.T) {
	mb := benchMB()
	minio, ca := testpg.StartMinIOTLS(t)
	t.Setenv("SSL_CERT_FILE", ca) // daytwo's S3 client trusts the test CA like any system CA
	// daytwo: the same code path as `daytwo backup run` and the restore, to MinIO over TLS.
	st, err := backup.NewS3(backup.S3Config{Endpoint: "https://" + minio.Endpoint, Bucket: "bench",
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	// The server archives its WAL through daytwo's Archiver, so a base
	// backup finds the WAL it needs in the archive, as in a Database.
	pg, _ := archivingServer(t, st, "physical/", "max_wal_size=4GB", "shared_buffers=256MB")

	// About BENCH_MB of each kind of data: pgbench accounts (15MB per
	// scale unit, which compress about 50:1, so the figures are mostly
	// pg_dump/pg_restore CPU) in database bench, and incompressible bytes in
	// database noise (the dump is as big as the data, the S3 path carries
	// it all).
	scale := max(1, mb/15)
	pg.Exec(t, "postgres", "CREATE DATABASE bench")
	timed(t, fmt.Sprintf("seed bench (pgbench -i -s %d)", scale), func() error {
		pg.Pgbench(t, "bench", scale)
		return nil
	})
	pg.Exec(t, "postgres", "CREATE DATABASE noise")
	rows := mb * 1000000 / 200 // ~200 bytes per row on disk
	timed(t, fmt.Sprintf("seed noise (%d rows of random bytes)", rows), func() error {
		pg.Exec(t, "noise", `CREATE TABLE noise AS SELECT g AS id,
			decode(md5(random()::text) || md5(random()::text) || md5(random()::text) || md5(random()::text) ||
			       md5(random()::text) || md5(random()::text) || md5(random()::text) || md5(random()::text), 'hex') AS v
			FROM generate_series(1, $1::int) g`, rows)
		return nil
	})

	// BENCH_ONLY=physical skips the logical half.
	var logicals []logicalResult
	if os.Getenv("BENCH_ONLY") != "physical" {
		for _, db := range []string{"bench", "noise"} {
			logicals = append(logicals, benchLogical(t, pg, st, db))
		}
	}
	best := func(cur, d time.Duration) time.Duration {
		if cur == 0 || d < cur {
			return d
		}
		return cur
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
	var rawBase, daytwoBase, daytwoExtract, extractCPU time.Duration
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
			base, err = wal.TakeBase(ctx, src, st, "physical/", fmt.Sprintf("base-%d", round), backup.Keys{})
			return err
		}))
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		took, cpu := timedCPU(t, fmt.Sprintf("daytwo base backup restore (%d)", round), func() error {
			return wal.ExtractBase(ctx, st, "physical/", base, dir, backup.Keys{})
		})
		daytwoExtract, extractCPU = best(daytwoExtract, took), best(extractCPU, cpu)
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

	walMax := benchWALRate(t, minio)

	fmt.Printf("\n%-46s %10s %10s %10s\n", "", "seconds", "MB/s", "stored MB")
	for _, l := range logicals {
		fmt.Printf("logical, database %s (%.0f MB):\n", l.db, l.sizeMB)
		for _, row := range []struct {
			name  string
			d     time.Duration
			bytes int64
		}{{"raw pg_dump -Fc > /dev/null (best of 2)", l.rawDump, l.rawBytes}, {"raw pg_dump -Fc -Z0 > /dev/null (best of 2)", l.uncompressedDump, 0},
			{"raw pg_dump -Fc -Z0 -> MinIO as is (best of 2)", l.storeFloor, 0},
			{"daytwo backup, zstd -> MinIO (best of 2)", l.daytwoBackup, l.storedBytes},
			{"raw pg_restore <- local file (best of 2)", l.rawRestore, 0}, {"daytwo restore <- MinIO (best of 2)", l.daytwoRestore, 0}} {
			fmt.Printf("%-46s %10.2f %10.1f %10s\n", row.name, row.d.Seconds(), l.sizeMB/row.d.Seconds(), storedMB(row.bytes))
		}
	}
	fmt.Printf("physical, whole cluster (%.0f MB):\n", clusterMB)
	for _, row := range []struct {
		name string
		d    time.Duration
	}{{"raw pg_basebackup -Ft > /dev/null (best of 2)", rawBase}, {"daytwo base backup -> MinIO (best of 2)", daytwoBase},
		{"daytwo base restore <- MinIO (best of 2)", daytwoExtract}, {"pgBackRest backup -> MinIO (full, best config)", peer},
		{"pgBackRest restore <- MinIO (best config)", peerRestore}} {
		if row.d > 0 {
			fmt.Printf("%-46s %10.2f %10.1f\n", row.name, row.d.Seconds(), clusterMBps(row.d))
		}
	}
	fmt.Printf("WAL archiving: %s\n", walMax)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	physicalRatio := ratio(clusterMBps(daytwoBase), clusterMBps(peer))
	physicalRestoreRatio := ratio(clusterMBps(daytwoExtract), clusterMBps(peerRestore))
	// The logical figures of the BENCH line are pgbench data's; the
	// incompressible data's get their own fields.
	var l, n logicalResult
	if len(logicals) == 2 {
		l, n = logicals[0], logicals[1]
	}
	fmt.Printf("logical: daytwo zstd/raw pg_dump -Fc speed %.2f (pgbench data), %.2f (random data) (goal >= 3); stored size %.2f, %.2f of pg_dump -Fc's (goal <= 1.1); restore %.2f, %.2f of raw\n",
		l.speedRatio(), n.speedRatio(), l.sizeRatio(), n.sizeRatio(), l.restoreRatio(), n.restoreRatio())
	// What no compression of pg_dump's stream can beat: the same pg_dump
	// compressing nothing. Where it is under 3, pg_dump and its server's
	// COPY bound the backup, not the compression.
	fmt.Printf("logical ceiling: raw pg_dump -Fc with no compression (-Z0) is %.2f (pgbench data), %.2f (random data) times as fast as pg_dump -Fc\n",
		l.ceilingRatio(), n.ceilingRatio())
	for _, x := range []logicalResult{l, n} {
		fmt.Printf("logical CPU (%s): pg_dump -Z0 > /dev/null used %.1f CPU seconds in %.2fs; daytwo's backup %.1f in %.2fs, %.2f of the ceiling's speed (goal >= 0.95): "+
			"its work on %d cores takes at least %.2fs, so at most %.2f; against the same dump put to MinIO uncompressed, %.2f\n", x.db, x.uncompressedCPU.Seconds(), x.uncompressedDump.Seconds(),
			x.daytwoBackupCPU.Seconds(), x.daytwoBackup.Seconds(), x.ofCeiling(), runtime.NumCPU(),
			x.daytwoBackupCPU.Seconds()/float64(runtime.NumCPU()), x.cpuBound(), x.ofStoreFloor())
	}
	// A restore downloads, decompresses and writes; MinIO reads and sends.
	// That work over the cores is the least time this restore takes (a
	// leaner one could do less work).
	extractLeast := time.Duration(float64(extractCPU) / float64(runtime.NumCPU()))
	restoreMax := ratio(clusterMBps(extractLeast), clusterMBps(peerRestore))
	fmt.Printf("physical restore CPU: %.1f CPU seconds in %.2fs; on %d cores that work takes at least %.2fs: %.2f of pgBackRest's restore speed at most (goal >= 2)\n",
		extractCPU.Seconds(), daytwoExtract.Seconds(), runtime.NumCPU(), extractLeast.Seconds(), restoreMax)
	fmt.Printf("physical: daytwo/pgBackRest backup %.2f (goal >= 2), restore %.2f (goal >= 2); daytwo/raw pg_basebackup %.2f; base %d bytes stored\n",
		physicalRatio, physicalRestoreRatio, ratio(clusterMBps(daytwoBase), clusterMBps(rawBase)), base.Size)
	fmt.Printf("BENCH backup mb=%d dump_mbps=%.1f backup_mbps=%.1f backup_ratio=%.2f restore_raw_mbps=%.1f restore_mbps=%.1f restore_ratio=%.2f "+
		"basebackup_raw_mbps=%.1f physical_mbps=%.1f pgbackrest_mbps=%.1f physical_ratio=%.2f pitr_restore_mbps=%.1f pgbackrest_restore_mbps=%.1f physical_restore_ratio=%.2f "+
		"wal_max_mbps=%.1f wal_max_lag_segments=%d logical_zstd_ratio=%.2f logical_zstd_size_ratio=%.2f logical_zstd_random_ratio=%.2f logical_zstd_random_size_ratio=%.2f logical_ceiling_ratio=%.2f logical_random_ceiling_ratio=%.2f "+
		"logical_of_ceiling=%.2f logical_random_of_ceiling=%.2f logical_cpu_bound=%.2f logical_random_cpu_bound=%.2f "+
		"logical_of_store_floor=%.2f logical_random_of_store_floor=%.2f physical_restore_cpu_bound=%.2f\n",
		mb, l.mbps(l.rawDump), l.mbps(l.daytwoBackup), l.speedRatio(), l.mbps(l.rawRestore), l.mbps(l.daytwoRestore), l.restoreRatio(),
		clusterMBps(rawBase), clusterMBps(daytwoBase), clusterMBps(peer), physicalRatio, clusterMBps(daytwoExtract), clusterMBps(peerRestore), physicalRestoreRatio,
		walMax.keptUpMBps, walMax.maxLag, l.speedRatio(), l.sizeRatio(), n.speedRatio(), n.sizeRatio(), l.ceilingRatio(), n.ceilingRatio(),
		l.ofCeiling(), n.ofCeiling(), l.cpuBound(), n.cpuBound(), l.ofStoreFloor(), n.ofStoreFloor(), restoreMax)
}

// logicalCompression is daytwo's default, or zstd at BENCH_ZSTD_LEVEL.
func logicalCompression() backup.Compression {
	if n, err := strconv.Atoi(os.Getenv("BENCH_ZSTD_LEVEL")); err == nil && n > 0 {
		return backup.Compression{Algorithm: backup.CompressionZstd, Level: n}
	}
	return backup.DefaultCompression
}

func storedMB(b int64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f", float64(b)/1e6)
}

// logicalResult is one database's logical figures: raw pg_dump -Fc and
// pg_restore against daytwo's zstd backup to MinIO and its restore.
type logicalResult struct {
	db                                               string
	sizeMB                                           float64
	rawDump, daytwoBackup, rawRestore, daytwoRestore time.Duration
	rawBytes, storedBytes                            int64
	// uncompressedDump is pg_dump -Fc --compress=0 to /dev/null: pg_dump
	// and its server with no compression at all, the bound of any design
	// that compresses pg_dump's stream.
	uncompressedDump time.Duration
	// The machine's CPU time (every process's) during the uncompressed
	// dump and during daytwo's backup, the least of the rounds.
	uncompressedCPU, daytwoBackupCPU time.Duration
	// storeFloor is pg_dump -Fc --compress=0 put to MinIO as it comes: the
	// uncompressed dump and the storing, with no compression.
	storeFloor time.Duration
}

// ofStoreFloor is daytwo's backup speed over that of the uncompressed dump
// put to MinIO as is.
func (l logicalResult) ofStoreFloor() float64 { return ratioOf(l.storeFloor, l.daytwoBackup) }

// ofCeiling is daytwo's backup speed over the uncompressed dump's.
func (l logicalResult) ofCeiling() float64 { return ratioOf(l.uncompressedDump, l.daytwoBackup) }

// cpuBound is the most ofCeiling could be on this machine's cores given
// the CPU time daytwo's backup took (pg_dump, its server, compression,
// upload and MinIO): that work cannot finish in less than it divided by
// the cores.
func (l logicalResult) cpuBound() float64 {
	least := time.Duration(float64(l.daytwoBackupCPU) / float64(runtime.NumCPU()))
	return ratioOf(l.uncompressedDump, max(l.uncompressedDump, least))
}

func (l logicalResult) mbps(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return l.sizeMB / d.Seconds()
}

func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}

func (l logicalResult) speedRatio() float64   { return ratioOf(l.rawDump, l.daytwoBackup) }
func (l logicalResult) ceilingRatio() float64 { return ratioOf(l.rawDump, l.uncompressedDump) }
func (l logicalResult) restoreRatio() float64 { return ratioOf(l.rawRestore, l.daytwoRestore) }
func (l logicalResult) sizeRatio() float64 {
	if l.rawBytes == 0 {
		return 0
	}
	return float64(l.storedBytes) / float64(l.rawBytes)
}

// benchLogical measures database db: each measurement runs twice,
// alternating raw and daytwo, and the best of each counts, so the server's
// state (WAL, checkpoints, cache) favours neither side.
func benchLogical(t *testing.T, pg *testpg.Server, st backup.Storage, db string) logicalResult {
	r := logicalResult{db: db}
	r.sizeMB, _ = strconv.ParseFloat(pg.Query(t, db, "SELECT pg_database_size(current_database()) / 1000000.0"), 64)
	opts := func(target string) backup.Options {
		return backup.Options{Conn: backup.Conn{Host: "127.0.0.1", Port: pg.Port, User: "postgres", Password: pg.Password, Database: target},
			Storage: st, Prefix: "bench/", BinDir: pg.BinDir, Series: backup.Series{Database: db}, Compression: logicalCompression(),
			// Measured against pg_dump of this one database; the server
			// holds the other shape's too.
			OnlyConnected: true}
	}
	dumpFile := filepath.Join(t.TempDir(), db+".dump")
	timed(t, "pg_dump -Fc to a local file ("+db+")", func() error {
		cmd := exec.Command(filepath.Join(pg.BinDir, "pg_dump"), "--format=custom", "--file="+dumpFile)
		cmd.Env = pg.Env(db)
		return run(cmd)
	})
	if fi, err := os.Stat(dumpFile); err == nil {
		r.rawBytes = fi.Size()
	}
	best := func(cur, d time.Duration) time.Duration {
		if cur == 0 || d < cur {
			return d
		}
		return cur
	}
	restoreFlags := []string{"--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction"}
	check := "SELECT count(*) || ':' || sum(hashtext(v::text)::bigint) FROM noise"
	if db == "bench" {
		check = "SELECT sum(abalance) || ':' || count(*) FROM pgbench_accounts"
	}
	for round := 1; round <= 2; round++ {
		dumpToNull := func(flags ...string) error {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer func() { _ = devnull.Close() }()
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_dump"), append([]string{"--format=custom"}, flags...)...)
			cmd.Env, cmd.Stdout = pg.Env(db), devnull
			return cmd.Run()
		}
		plain := func() {
			r.rawDump = best(r.rawDump, timed(t, fmt.Sprintf("raw pg_dump -Fc > /dev/null (%s, %d)", db, round), func() error { return dumpToNull() }))
		}
		uncompressed := func() {
			took, cpu := timedCPU(t, fmt.Sprintf("raw pg_dump -Fc -Z0 > /dev/null (%s, %d)", db, round),
				func() error { return dumpToNull("--compress=0") })
			r.uncompressedDump, r.uncompressedCPU = best(r.uncompressedDump, took), best(r.uncompressedCPU, cpu)
		}
		// In turn first: round 2 starts after a DROP DATABASE's checkpoint.
		if round == 1 {
			plain()
			uncompressed()
		} else {
			uncompressed()
			plain()
		}
		// What any design that stores the dump must also do: pg_dump's
		// uncompressed stream put to the same MinIO as it comes.
		r.storeFloor = best(r.storeFloor, timed(t, fmt.Sprintf("raw pg_dump -Fc -Z0 -> MinIO, as is (%s, %d)", db, round), func() error {
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_dump"), "--format=custom", "--compress=0")
			var stderr strings.Builder
			cmd.Env, cmd.Stderr = pg.Env(db), &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				return err
			}
			if err := cmd.Start(); err != nil {
				return err
			}
			key := fmt.Sprintf("floor/%s-%d.dump", db, round)
			put := st.Put(ctx, key, out)
			if put != nil {
				_ = cmd.Process.Kill() // nothing reads its output any more
			}
			if err := cmd.Wait(); err != nil && put == nil {
				return fmt.Errorf("pg_dump: %w: %s", err, stderr.String())
			}
			return errors.Join(put, st.Delete(ctx, key))
		}))
		var m backup.Manifest
		took, cpu := timedCPU(t, fmt.Sprintf("daytwo backup to MinIO (%s, %d)", db, round), func() error {
			var err error
			m, err = backup.Run(ctx, opts(db), fmt.Sprintf("%s-round-%d", db, round), "bench")
			return err
		})
		r.daytwoBackup, r.daytwoBackupCPU = best(r.daytwoBackup, took), best(r.daytwoBackupCPU, cpu)
		r.storedBytes = m.Bytes
		target := fmt.Sprintf("raw_restore_%d", round)
		pg.Exec(t, "postgres", "CREATE DATABASE "+target)
		r.rawRestore = best(r.rawRestore, timed(t, fmt.Sprintf("raw pg_restore from a local file (%s, %d)", db, round), func() error {
			cmd := exec.Command(filepath.Join(pg.BinDir, "pg_restore"), append(restoreFlags, "--dbname="+target, dumpFile)...)
			cmd.Env = pg.Env(target)
			return run(cmd)
		}))
		pg.Exec(t, "postgres", "DROP DATABASE "+target)
		target = fmt.Sprintf("daytwo_restore_%d", round)
		pg.Exec(t, "postgres", "CREATE DATABASE "+target)
		r.daytwoRestore = best(r.daytwoRestore, timed(t, fmt.Sprintf("daytwo restore from MinIO (%s, %d)", db, round), func() error {
			_, err := backup.Restore(ctx, opts(target), m.ID, "")
			return err
		}))
		if round == 1 {
			if a, b := pg.Query(t, db, check), pg.Query(t, target, check); a != b {
				t.Fatalf("restored data of %s differs: %s vs %s", db, b, a)
			}
		}
		pg.Exec(t, "postgres", "DROP DATABASE "+target)
	}
	return r
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
