package backup_test

import (
	"fmt"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// A logical backup of a Database that holds several databases (an import
// of shop and audit, say) covers every one, not only the one it connects
// to, and a restore into a new server brings them all back, each under its
// owner. Retention deletes every part of a pruned backup.
func TestLogicalBackupCoversEveryDatabase(t *testing.T) {
	t.Parallel()
	src, st := appServer(t, `CREATE DATABASE shop OWNER app`, `CREATE DATABASE "audit-log" OWNER app`)
	for db, rows := range map[string]int{"app": 0, "shop": 5000, "audit-log": 300} {
		src.Exec(t, db, fmt.Sprintf("SET ROLE app; CREATE TABLE t AS SELECT g AS id FROM generate_series(1, %d) g", rows))
	}
	o := appOptions(src, st)
	m, err := backup.Run(ctx, o, "20260101T000000Z", "test")
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if len(m.Databases) != 2 {
		t.Fatalf("the manifest names %d other databases, want 2 (shop, audit-log): %+v", len(m.Databases), m.Databases)
	}
	dst := restoreApp(t, st, m.ID)
	for db, want := range map[string]string{"app": "0", "shop": "5000", "audit-log": "300"} {
		if got := dst.Query(t, db, "SELECT count(*)::text FROM t"); got != want {
			t.Errorf("%s: %s rows restored, want %s", db, got, want)
		}
		if got := dst.Query(t, "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '"+db+"'"); got != "app" {
			t.Errorf("%s is owned by %q, want app", db, got)
		}
	}
	// A second restore into the same server refuses to overwrite them.
	if _, err := backup.Restore(ctx, opts(dst, "app", st), m.ID, "app"); err == nil {
		t.Error("a restore over existing databases succeeded")
	}

	if _, err := backup.Run(ctx, o, "20260102T000000Z", "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := backup.Prune(ctx, st, o.Prefix, o.Series, backup.Retention{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Databases {
		if _, err := st.Size(ctx, p.Key); err == nil {
			t.Errorf("%s of the pruned backup is still stored", p.Key)
		}
	}
}

// appServer starts a server with the login role app (password app-secret)
// owning database app, runs setup there as the superuser, and gives a
// bucket on a MinIO of its own.
func appServer(t *testing.T, setup ...string) (*testpg.Server, backup.Storage) {
	t.Helper()
	src := testpg.Start(t)
	st := s3(t, testpg.StartMinIO(t), "backups")
	for _, q := range append([]string{"CREATE ROLE app LOGIN PASSWORD 'app-secret'", "CREATE DATABASE app OWNER app"}, setup...) {
		src.Exec(t, "postgres", q)
	}
	return src, st
}

// appOptions backs up database app of src as app.
func appOptions(src *testpg.Server, st backup.Storage) backup.Options {
	o := opts(src, "app", st)
	o.Conn.User, o.Conn.Password = "app", "app-secret"
	return o
}

// restoreApp restores backup id into database app, owned by app, of a
// new server, as daytwo does for a Database bootstrapped from it.
func restoreApp(t *testing.T, st backup.Storage, id string) *testpg.Server {
	t.Helper()
	dst := freshApp(t)
	if _, err := backup.Restore(ctx, opts(dst, "app", st), id, "app"); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return dst
}

// freshApp is a new server with database app owned by app, as daytwo makes
// a Database it restores into.
func freshApp(t *testing.T) *testpg.Server {
	t.Helper()
	dst := testpg.Start(t)
	dst.Exec(t, "postgres", "CREATE ROLE app LOGIN")
	dst.Exec(t, "postgres", "CREATE DATABASE app OWNER app")
	return dst
}
