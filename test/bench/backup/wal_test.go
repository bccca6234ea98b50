//go:build bench

package backup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// walResult is the WAL archiving figure: the highest WAL rate pgbench
// reached here at which the archive stayed within 2 segments of the
// server, and the largest lag seen at any rate.
type walResult struct {
	keptUpMBps float64
	maxLag     int
	levels     []string
}

func (w walResult) String() string {
	return fmt.Sprintf("kept up (lag < 2 segments) to %.1f MB/s of WAL; largest lag %d segments; %s",
		w.keptUpMBps, w.maxLag, strings.Join(w.levels, "; "))
}

// markingStorage leaves a marker file named after each WAL file once it
// is stored: the bench's archive_command waits for it, as daytwo's waits
// for the manager's answer, so PostgreSQL recycles nothing unarchived.
type markingStorage struct {
	backup.Storage
	dir string
}

func (m markingStorage) Put(ctx context.Context, key string, r io.Reader) error {
	if err := m.Storage.Put(ctx, key, r); err != nil {
		return err
	}
	if strings.Contains(key, "/wal/") {
		name := strings.TrimSuffix(path.Base(key), ".zst")
		return os.WriteFile(filepath.Join(m.dir, name), nil, 0o644)
	}
	return nil
}

// archivingServer starts a server whose WAL daytwo's Archiver ships to st
// under prefix (zstd, 4 uploads in flight, as the instance manager runs
// it). Its archive_command names each file on a FIFO, and the bench asks
// the Archiver for it at once, as the manager does when archive_command
// asks; then it waits until the file is stored (markingStorage). The
// Archiver stops after the server (cleanups run last first), and
// archive_command gives up after 30 s, so a shutdown never waits for good.
func archivingServer(t *testing.T, st backup.Storage, prefix string, settings ...string) (*testpg.Server, *wal.Archiver) {
	marks := t.TempDir()
	fifo := filepath.Join(marks, "ask")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, marks)
	actx, stop := context.WithCancel(ctx)
	t.Cleanup(func() {
		stop()
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close() // frees the reader blocked in Open
		}
	})
	pg := testpg.Start(t, append([]string{"archive_mode=on",
		fmt.Sprintf("archive_command=echo %%f > %s; i=0; while [ ! -e %s/%%f ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 1; sleep 0.01; done", fifo, marks)},
		settings...)...)
	a := &wal.Archiver{Storage: markingStorage{st, marks}, Prefix: prefix, WALDir: filepath.Join(pg.Dir, "data", "pg_wal"), Parallel: 4}
	go a.Run(actx)
	go func() {
		for actx.Err() == nil {
			f, err := os.Open(fifo) // blocks until archive_command writes
			if err != nil {
				return
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				go func(name string) { _ = a.Archive(actx, name) }(sc.Text())
			}
			_ = f.Close()
		}
	}()
	return pg, a
}

// benchWALRate drives write-heavy pgbench at 16 and 32 MB/s of WAL, then
// as fast as 1, 2 and 4 clients go, for BENCH_WAL_SECONDS each (default
// 15) against an archivingServer, and samples the archive lag in segments
// every 100 ms.
func benchWALRate(t *testing.T, minio *testpg.MinIO) walResult {
	seconds := 15
	if n, err := strconv.Atoi(os.Getenv("BENCH_WAL_SECONDS")); err == nil && n > 0 {
		seconds = n
	}
	st, err := backup.NewS3(backup.S3Config{Endpoint: "https://" + minio.Endpoint, Bucket: "bench",
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	pg, a := archivingServer(t, st, "walbench/", "full_page_writes=on", "max_wal_size=2GB", "checkpoint_timeout=30s")

	pg.Exec(t, "postgres", "CREATE TABLE walload (id int, v text)")
	script := filepath.Join(t.TempDir(), "insert.sql")
	// About 40 kB of WAL per transaction: rows of md5 text compress
	// like ordinary table data.
	if err := os.WriteFile(script, []byte("INSERT INTO walload SELECT g, repeat(md5(random()::text), 8) FROM generate_series(1, 100) g;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	segno := func(name string) int64 {
		if len(name) < 24 {
			return -1
		}
		hi, _ := strconv.ParseInt(name[8:16], 16, 64)
		lo, _ := strconv.ParseInt(name[16:24], 16, 64)
		return hi*0x100 + lo
	}
	conn, err := pg.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// lag is how many finished segments are not archived yet.
	lag := func() (int, int64) {
		var cur, last string
		var lsn int64
		if err := conn.QueryRow(ctx, `SELECT pg_walfile_name(pg_current_wal_lsn()), coalesce(last_archived_wal, ''),
			pg_current_wal_lsn() - '0/0' FROM pg_stat_archiver`).Scan(&cur, &last, &lsn); err != nil {
			t.Fatal(err)
		}
		if last == "" {
			return int(segno(cur)), lsn // nothing archived yet: every finished segment waits
		}
		return int(max(0, segno(cur)-segno(last)-1)), lsn
	}
	// Each transaction's WAL, measured, turns target rates into pgbench -R.
	_, before := lag()
	calibrate := exec.Command(filepath.Join(pg.BinDir, "pgbench"), "-n", "-f", script, "-t", "200", "postgres")
	calibrate.Env = pg.Env("postgres")
	if err := run(calibrate); err != nil {
		t.Fatal(err)
	}
	_, after := lag()
	perTx := float64(after-before) / 200
	type level struct {
		name    string
		clients int
		rate    float64 // MB/s of WAL asked for; 0 is as fast as pgbench goes
	}
	var res walResult
	for _, lv := range []level{{"16 MB/s asked", 1, 16}, {"32 MB/s asked", 1, 32}, {"1 client, unlimited", 1, 0},
		{"2 clients, unlimited", 2, 0}, {"4 clients, unlimited", 4, 0}} {
		pg.Exec(t, "postgres", "TRUNCATE walload")
		pg.Exec(t, "postgres", "CHECKPOINT")
		_, startLSN := lag()
		start := time.Now()
		args := []string{"-n", "-f", script, "-c", strconv.Itoa(lv.clients), "-j", strconv.Itoa(lv.clients), "-T", strconv.Itoa(seconds)}
		if lv.rate > 0 {
			args = append(args, "-R", strconv.Itoa(int(lv.rate*1e6/perTx)))
		}
		cmd := exec.Command(filepath.Join(pg.BinDir, "pgbench"), append(args, "postgres")...)
		cmd.Env = pg.Env("postgres")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		maxLag := 0
		var endLSN int64
		var took time.Duration
	sample:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pgbench, %s: %v", lv.name, err)
				}
				took = time.Since(start)
				_, endLSN = lag()
				break sample
			case <-time.After(100 * time.Millisecond):
				l, _ := lag()
				maxLag = max(maxLag, l)
			}
		}
		mbps := float64(endLSN-startLSN) / 1e6 / took.Seconds()
		// The archive catches up before the next rate, within a bound.
		caughtUp := time.Now()
		for l, _ := lag(); l > 0 && time.Since(caughtUp) < 2*time.Minute; l, _ = lag() {
			time.Sleep(100 * time.Millisecond)
		}
		level := fmt.Sprintf("%s: %.1f MB/s, lag up to %d, caught up %.1fs after", lv.name, mbps, maxLag, time.Since(caughtUp).Seconds())
		t.Log("WAL archiving, " + level)
		res.levels = append(res.levels, level)
		res.maxLag = max(res.maxLag, maxLag)
		if maxLag < 2 && mbps > res.keptUpMBps {
			res.keptUpMBps = mbps
		}
	}
	s := a.Stats()
	if s.Failed > 0 {
		t.Logf("WAL archiving: %d failed pushes, the last: %s", s.Failed, s.LastError)
	}
	return res
}
