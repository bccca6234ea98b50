package instance_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// bootstrap.import: a PostgreSQL 15 outside daytwo becomes this primary's
// data; a wrong password fails the bootstrap, which never serves.
func TestBootstrapImport(t *testing.T) {
	t.Parallel()
	src := testpg.StartWith(t, testpg.BinDirOf(t, "15"))
	src.Exec(t, "postgres", "CREATE ROLE legacy_app LOGIN PASSWORD 'legacy-pass'")
	src.Exec(t, "postgres", "CREATE DATABASE shop OWNER legacy_app")
	src.Pgbench(t, "shop", 1)
	src.Exec(t, "shop", "ALTER TABLE pgbench_accounts OWNER TO legacy_app")
	const sum = "SELECT sum(abalance) || ':' || count(*) || ':' || md5(string_agg(aid::text, ',' ORDER BY aid)) FROM pgbench_accounts"
	want := src.Query(t, "shop", sum)
	flags := []string{"--" + instanceapi.FlagImportHost, "127.0.0.1", "--" + instanceapi.FlagImportPort, strconv.Itoa(src.Port),
		"--" + instanceapi.FlagImportDatabases, "shop", "--" + instanceapi.FlagImportRoles}

	t.Run("wrong password", func(t *testing.T) {
		in := newInstance(t, flags...)
		termLog := filepath.Join(in.root, "termination-log")
		in.extraFlags = append(in.extraFlags, "--termination-log", termLog)
		in.env = []string{instanceapi.EnvImportUser + "=postgres", instanceapi.EnvImportPassword + "=not-it"}
		in.start("orders-0")
		if in.exit(90*time.Second, "after a failed import") == nil {
			t.Fatal("the instance manager exited cleanly after a failed import")
		}
		msg, _ := os.ReadFile(termLog)
		if !strings.HasPrefix(string(msg), instanceapi.TerminationImportFailed) || !strings.Contains(string(msg), "password") ||
			strings.Contains(string(msg), "not-it") {
			t.Fatalf("termination message %q: want the import failure, its cause, and no password", msg)
		}
		if _, err := os.Stat(filepath.Join(in.root, "data", "PG_VERSION")); !os.IsNotExist(err) {
			t.Fatalf("a failed import left a data directory (%v)", err)
		}
	})

	in := newInstance(t, flags...)
	in.env = []string{instanceapi.EnvImportUser + "=postgres", instanceapi.EnvImportPassword + "=" + src.Password}
	start := time.Now()
	in.start("orders-0")
	in.waitReady(120 * time.Second)
	t.Logf("imported and ready in %s", time.Since(start).Round(time.Millisecond))
	if got := in.superuser("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'shop'"); got != "legacy_app" {
		t.Fatalf("shop's owner %q", got)
	}
	ctx := context.Background()
	c, err := in.connect(ctx, "legacy_app", "legacy-pass", "shop")
	if err != nil {
		t.Fatalf("the imported role logs in with its old password: %v", err)
	}
	defer func() { _ = c.Close(ctx) }()
	var got string
	if err := c.QueryRow(ctx, sum).Scan(&got); err != nil || got != want {
		t.Fatalf("imported data %q (%v), want %q", got, err, want)
	}
	// daytwo's own application database and owner are there too.
	if v := in.query(ctx, "SELECT current_user"); v != "shop" {
		t.Fatalf("application owner: %s", v)
	}
	in.stop()
}
