package backup_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

const importChecksum = `SELECT md5(
	(SELECT string_agg(a::text, ',' ORDER BY aid) FROM pgbench_accounts a) ||
	(SELECT string_agg(k::text, ',' ORDER BY id) FROM kept k))`

// A PostgreSQL 15 outside daytwo, imported into this version's server:
// two databases, the roles with their passwords, owners and grants.
func TestImportFromAnOlderServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := testpg.StartWith(t, testpg.BinDirOf(t, "15"))
	src.Exec(t, "postgres", "CREATE ROLE shopkeeper LOGIN PASSWORD 'kept-secret'")
	src.Exec(t, "postgres", "CREATE ROLE reader NOLOGIN")
	src.Exec(t, "postgres", "CREATE DATABASE shop OWNER shopkeeper")
	src.Exec(t, "postgres", "CREATE DATABASE audit")
	src.Pgbench(t, "shop", 1)
	src.Exec(t, "shop", "CREATE TABLE kept (id int PRIMARY KEY, note text); INSERT INTO kept SELECT g, md5(g::text) FROM generate_series(1, 1000) g")
	src.Exec(t, "shop", "ALTER TABLE kept OWNER TO shopkeeper; GRANT SELECT ON kept TO reader")
	src.Exec(t, "audit", "CREATE TABLE events AS SELECT g AS id FROM generate_series(1, 50) g")
	want := src.Query(t, "shop", importChecksum)

	dst := testpg.Start(t)
	var steps []string
	err := backup.Import(ctx, backup.ImportOptions{
		Source:    backup.Conn{Host: "127.0.0.1", Port: src.Port, User: "postgres", Password: src.Password, Database: "postgres"},
		Target:    backup.Conn{Host: "127.0.0.1", Port: dst.Port, User: "postgres", Password: dst.Password, Database: "postgres"},
		Databases: []string{"shop", "audit"}, Roles: true, BinDir: dst.BinDir,
		Progress: func(s string) { steps = append(steps, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := dst.Query(t, "shop", importChecksum); got != want {
		t.Fatalf("imported checksum %s, want %s", got, want)
	}
	if got := dst.Query(t, "audit", "SELECT count(*) FROM events"); got != "50" {
		t.Fatalf("audit.events has %s rows, want 50", got)
	}
	if got := dst.Query(t, "shop", "SELECT tableowner || ',' || has_table_privilege('reader', 'kept', 'SELECT') FROM pg_tables WHERE tablename = 'kept'"); got != "shopkeeper,true" {
		t.Fatalf("owner and grant of kept: %s", got)
	}
	if got := dst.Query(t, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'shop'"); got != "shopkeeper" {
		t.Fatalf("shop's owner %s", got)
	}
	// The password came along: the application logs in as before.
	psql := exec.Command(filepath.Join(dst.BinDir, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(dst.Port), "-U", "shopkeeper", "-d", "shop", "-Atc", "SELECT count(*) FROM kept")
	psql.Env = append(psql.Environ(), "PGPASSWORD=kept-secret")
	if out, err := psql.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1000" {
		t.Fatalf("shopkeeper's login after the import: %v: %s", err, out)
	}
	if len(steps) != 3 || !strings.Contains(steps[2], "audit (2 of 2)") {
		t.Fatalf("progress: %q", steps)
	}

	// A database that is not there fails the import, naming it.
	err = backup.Import(ctx, backup.ImportOptions{
		Source:    backup.Conn{Host: "127.0.0.1", Port: src.Port, User: "postgres", Password: src.Password, Database: "postgres"},
		Target:    backup.Conn{Host: "127.0.0.1", Port: dst.Port, User: "postgres", Password: dst.Password, Database: "postgres"},
		Databases: []string{"missing"}, Owner: "postgres", BinDir: dst.BinDir,
	})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("import of a missing database: %v", err)
	}
}
