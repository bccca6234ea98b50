package instance_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

func TestPrimaryLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := newInstance(t)
	in.start("orders-0")
	took := in.waitReady(90 * time.Second)
	t.Logf("initdb to ready: %s", took.Round(time.Millisecond))

	s := in.status()
	if s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning || s.InRecovery ||
		!strings.HasPrefix(s.PostgresVersion, testpg.Major(t)+".") || s.LSN == "" || s.PendingRestart {
		t.Fatalf("unexpected status %+v", s)
	}

	// A SQL round trip over TCP with the generated credentials and scram.
	conn, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatalf("app login over TCP: %v", err)
	}
	var method string
	if err := conn.QueryRow(ctx, "SELECT CASE WHEN rolpassword IS NULL THEN 'none' ELSE 'set' END FROM pg_authid WHERE rolname='shop'").Scan(&method); err == nil {
		t.Fatalf("the app role can read pg_authid")
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE orders (id int primary key, item text); INSERT INTO orders VALUES (1, 'tea'), (2, 'cake')"); err != nil {
		t.Fatal(err)
	}
	var auth string
	if err := conn.QueryRow(ctx, "SELECT current_setting('password_encryption')").Scan(&auth); err != nil || auth != "scram-sha-256" {
		t.Fatalf("password_encryption = %q, %v", auth, err)
	}
	_ = conn.Close(ctx)
	if _, err := in.connect(ctx, "shop", "wrong", "orders"); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if _, err := in.connect(ctx, "postgres", "", "postgres"); err == nil {
		t.Fatal("the superuser logged in over TCP")
	}

	if got := in.show(ctx, "shared_buffers"); got != "128MB" {
		t.Fatalf("shared_buffers = %s, want the tuned 128MB", got)
	}

	// A reloadable change applies without a restart; a restart-only one is reported.
	in.setParameters(map[string]string{"work_mem": "12MB", "shared_buffers": "64MB"})
	eventually(t, 15*time.Second, func() bool { return in.show(ctx, "work_mem") == "12MB" }, "work_mem reloaded")
	eventually(t, 15*time.Second, func() bool {
		s := in.status()
		return s.PendingRestart && strings.Join(s.PendingRestartSettings, ",") == "shared_buffers"
	}, "shared_buffers pending restart")

	took = in.stop()
	t.Logf("SIGTERM to exit: %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("shutdown took %s, more than the 10s timeout", took)
	}
	out, err := exec.Command(filepath.Join(testpg.BinDir(t), "pg_controldata"), filepath.Join(in.root, "data")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Database cluster state:               shut down") {
		t.Fatalf("the cluster was not shut down cleanly: %v\n%s", err, out)
	}

	// A restart keeps the data and applies the pending setting.
	in.start("orders-0")
	in.waitReady(60 * time.Second)
	conn, err = in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after restart = %d, %v", n, err)
	}
	if got := in.show(ctx, "shared_buffers"); got != "64MB" {
		t.Fatalf("shared_buffers after restart = %s, want 64MB", got)
	}
	if s := in.status(); s.PendingRestart {
		t.Fatalf("still pending restart after a restart: %+v", s)
	}

	t.Run("replica clones and streams", func(t *testing.T) {
		rep := newInstance(t, "--role", "replica", "--primary-host", "127.0.0.1", "--primary-port", strconv.Itoa(in.pgPort))
		rep.start("orders-1")
		took := rep.waitReady(90 * time.Second)
		t.Logf("clone to ready: %s", took.Round(time.Millisecond))
		if s := rep.status(); s.Role != instanceapi.RoleReplica || !s.InRecovery || !s.Streaming {
			t.Fatalf("unexpected replica status %+v", s)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO orders VALUES (3, 'scone')"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, func() bool {
			rc, err := rep.connect(ctx, "shop", appPassword, "orders")
			if err != nil {
				return false
			}
			defer func() { _ = rc.Close(ctx) }()
			var n int
			return rc.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n) == nil && n == 3
		}, "the replica sees the new row")

		// Without its primary a replica serves ever older data: not ready.
		_ = conn.Close(ctx)
		in.stop()
		eventually(t, 15*time.Second, func() bool { return !rep.readyz() }, "the replica not ready without its primary")
		in.start("orders-0")
		in.waitReady(60 * time.Second)
		eventually(t, 30*time.Second, rep.readyz, "the replica ready again once it streams")
	})
}
