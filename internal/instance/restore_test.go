package instance_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// A Database bootstrapped from a backup: the instance restores it before it
// ever listens on TCP, and refuses a corrupt one without becoming ready.
func TestRestoreFromBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := newInstance(t)
	src.start("orders-0")
	src.waitReady(90 * time.Second)
	conn, err := src.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	// Large enough that a restore takes a moment, so it can be killed halfway.
	if _, err := conn.Exec(ctx, "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 300000) g; "+
		"ALTER TABLE items ADD PRIMARY KEY (id)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	want := checksum(t, src)

	minio := testpg.StartMinIO(t)
	st, err := backup.NewS3(backup.S3Config{Endpoint: minio.Endpoint, Bucket: "backups", Insecure: true,
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	o := backup.Options{Conn: backup.Conn{Host: "127.0.0.1", Port: src.pgPort, User: "shop", Password: appPassword, Database: "orders"},
		Storage: st, Prefix: "ns/orders/", BinDir: testpg.BinDir(t),
		Series: backup.Series{UID: "uid-nightly", Name: "ns/orders-nightly", Database: "orders"}}
	m, err := backup.Run(ctx, o, "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	restoreFlags := []string{"--from-backup", "--restore-s3-endpoint", minio.Endpoint, "--restore-s3-bucket", "backups",
		"--restore-s3-insecure", "--restore-prefix", "ns/orders", "--restore-series-uid", "uid-nightly",
		"--restore-database-name", "orders", "--termination-log", ""}
	creds := []string{"AWS_ACCESS_KEY_ID=" + minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + minio.SecretKey}

	// As the operator runs it: the restore init container (--bootstrap-only,
	// the storage and its keys) restores and exits; the postgres container,
	// without them, serves the restored data.
	t.Run("a good backup", func(t *testing.T) {
		dst := newInstance(t, append([]string{"--" + instanceapi.FlagBootstrapOnly}, restoreFlags...)...)
		dst.env = creds
		start := time.Now()
		for range 2 { // the second finds the data and exits at once
			dst.runToExit("copy-0", "--bootstrap-only")
		}
		dst.extraFlags, dst.env = []string{"--from-backup", "--termination-log", ""}, nil
		dst.start("copy-0")
		took := dst.waitReady(90 * time.Second)
		t.Logf("restored and ready in %s", time.Since(start).Round(time.Millisecond))
		if took > 30*time.Second {
			t.Errorf("the postgres container took %s to serve data already restored", took)
		}
		if got := dst.show(ctx, "shared_buffers"); got != "128MB" {
			t.Errorf("restored instance runs shared_buffers %s", got)
		}
		c, err := dst.connect(ctx, "shop", appPassword, "orders")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close(ctx) }()
		var owner string
		if err := c.QueryRow(ctx, "SELECT tableowner FROM pg_tables WHERE tablename = 'items'").Scan(&owner); err != nil || owner != "shop" {
			t.Fatalf("restored table owned by %q: %v", owner, err)
		}
		if got := checksum(t, dst); got != want {
			t.Fatalf("restored checksum %s, want %s", got, want)
		}
	})

	// The postgres container never restores: without data it says that
	// only a new pod (its restore init container) restores again.
	t.Run("no data and no storage", func(t *testing.T) {
		dst := newInstance(t, "--from-backup", "--termination-log", filepath.Join(t.TempDir(), "termination"))
		dst.start("copy-0")
		eventually(t, 30*time.Second, func() bool {
			s, ok := dst.tryStatus()
			return ok && s.Phase == instanceapi.PhaseFailed && strings.Contains(s.Message, "only the restore init container")
		}, "phase Failed saying only the restore init container restores")
	})

	// A restore killed halfway (OOM, eviction, node loss: no cleanup runs)
	// must not leave a data directory the next start serves.
	t.Run("killed mid-restore restores again", func(t *testing.T) {
		dst := newInstance(t, restoreFlags...)
		dst.env = creds
		dst.start("copy-0")
		deadline := time.Now().Add(60 * time.Second)
		for len(descendants(dst.cmd.Process.Pid, "pg_restore")) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("pg_restore never ran")
			}
			time.Sleep(5 * time.Millisecond)
		}
		dst.kill()
		if _, err := os.Stat(filepath.Join(dst.root, "data", "PG_VERSION")); err == nil {
			t.Log("the killed restore left a data directory with PG_VERSION")
		}
		dst.start("copy-0")
		dst.waitReady(120 * time.Second)
		if got := checksum(t, dst); got != want {
			t.Fatalf("after a killed restore the instance serves checksum %s, want %s", got, want)
		}
	})

	// A retained volume never stands in for the restore a spec asks for.
	t.Run("retained data is not served in place of a restore", func(t *testing.T) {
		old := newInstance(t, "--database-uid", "uid-old")
		old.start("orders-0")
		old.waitReady(90 * time.Second)
		c, err := old.connect(ctx, "shop", appPassword, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (42)"); err != nil {
			t.Fatal(err)
		}
		_ = c.Close(ctx)
		old.stop()

		// The same volume under a new Database that asks for a restore.
		termLog := filepath.Join(old.root, "termination-log")
		old.extraFlags = append(slices.Clone(restoreFlags), "--database-uid", "uid-new", "--bootstrap-source", "fromBackup/orders-nightly",
			"--termination-log", termLog)
		old.env = creds
		old.start("orders-0")
		if old.exit(60*time.Second, "on another Database's data instead of restoring") == nil {
			t.Fatal("the instance manager exited cleanly on another Database's data")
		}
		msg, _ := os.ReadFile(termLog)
		if !strings.HasPrefix(string(msg), instanceapi.TerminationDataConflict) || !strings.Contains(string(msg), "daytwo.dev/reuse-data") {
			t.Fatalf("termination message %q does not explain the conflict", msg)
		}

		// Re-using it is an explicit choice, and the data is intact.
		old.extraFlags = append(old.extraFlags, "--reuse-data")
		old.start("orders-0")
		old.waitReady(60 * time.Second)
		if got := old.query(ctx, "SELECT count(*)::text FROM kept"); got != "1" {
			t.Fatalf("kept rows = %s, want 1", got)
		}
		old.stop()

		// deletionPolicy Retain's promise: initdb on initdb data continues on it.
		old.extraFlags = []string{"--database-uid", "uid-third"}
		old.start("orders-0")
		old.waitReady(60 * time.Second)
		if got := old.query(ctx, "SELECT count(*)::text FROM kept"); got != "1" {
			t.Fatalf("kept rows = %s, want 1", got)
		}
	})

	t.Run("a corrupt backup", func(t *testing.T) {
		rc, err := st.Get(ctx, m.DataKey)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		_ = rc.Close()
		data[len(data)/3] ^= 0xff
		if err := st.Put(ctx, m.DataKey, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		dst := newInstance(t, restoreFlags...)
		dst.env = creds
		dst.start("copy-0")
		select {
		case err := <-dst.exited:
			if err == nil {
				t.Fatal("the instance manager exited cleanly after a corrupt restore")
			}
		case <-time.After(90 * time.Second):
			t.Fatal("the instance manager kept running after a corrupt restore")
		}
		if entries, _ := os.ReadDir(filepath.Join(dst.root, "data")); len(entries) != 0 {
			t.Fatalf("the refused restore left %d entries in the data directory", len(entries))
		}
	})
}
