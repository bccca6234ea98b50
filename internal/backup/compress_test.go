package backup_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// A logical backup taken by the database's owner (not a superuser), with
// each compression, restores on another server the same rows and the roles
// behind them: a role that only reads, a login role that is a member of it
// with its own setting, and a role that owns a table. Objects keep their
// owners and grants come back; under another owner, that owner owns
// everything and the grants stay. The stored size follows the compression.
func TestLogicalBackupCompressesAndBringsBackRoles(t *testing.T) {
	t.Parallel()
	src := testpg.Start(t)
	minio := testpg.StartMinIO(t)
	st := s3(t, minio, "backups")
	for _, q := range []string{
		"CREATE ROLE shop LOGIN PASSWORD 'shop-secret'",
		"CREATE DATABASE shop OWNER shop",
		"CREATE ROLE reporting NOLOGIN",
		"CREATE ROLE analyst LOGIN IN ROLE reporting",
		"ALTER ROLE analyst SET work_mem = '8MB'",
		`CREATE ROLE "Audit; Team" NOLOGIN`,
		"COMMENT ON ROLE reporting IS 'reads; never writes'",
	} {
		src.Exec(t, "postgres", q)
	}
	src.Exec(t, "shop", "SET ROLE shop; CREATE TABLE orders AS SELECT g AS id, md5(g::text) AS note FROM generate_series(1, 200000) g")
	src.Exec(t, "shop", "SET ROLE shop; GRANT SELECT ON orders TO reporting")
	src.Exec(t, "shop", `CREATE TABLE audit (at timestamptz); ALTER TABLE audit OWNER TO "Audit; Team"; GRANT SELECT ON audit TO shop`)
	want := src.Query(t, "shop", "SELECT count(*) || ':' || sum(hashtext(note)::bigint) FROM orders")

	o := opts(src, "shop", st)
	o.Conn.User, o.Conn.Password = "shop", "shop-secret"
	// The new server has the owner daytwo creates (the same name), and
	// another role for a restore under another owner.
	dst := testpg.Start(t)
	dst.Exec(t, "postgres", "CREATE ROLE shop LOGIN")
	dst.Exec(t, "postgres", "CREATE ROLE copy LOGIN")
	for i, c := range []backup.Compression{{Algorithm: "none"}, {Algorithm: "gzip", Level: 1}, {Algorithm: "zstd"}, {Algorithm: "zstd", Level: 19}} {
		o.Compression = c
		m, err := backup.Run(ctx, o, fmt.Sprintf("20260101T00000%dZ", i), "test")
		if err != nil {
			t.Fatalf("%+v backup: %v", c, err)
		}
		t.Logf("%s level %d: %d bytes stored of %d written by pg_dump, roles %d bytes", c.Algorithm, c.Level, m.Bytes, m.RawBytes, m.Roles.Bytes)
		switch {
		case m.Compression != c.Algorithm || m.Owner != "shop" || m.Roles == nil:
			t.Fatalf("manifest = %+v", m)
		case c.Algorithm == "none" && m.Bytes != m.RawBytes:
			t.Fatalf("uncompressed backup stored %d bytes of %d", m.Bytes, m.RawBytes)
		case c.Algorithm != "none" && m.Bytes*2 > m.RawBytes:
			t.Fatalf("%s stored %d bytes of %d: not compressed", c.Algorithm, m.Bytes, m.RawBytes)
		}

		db := "copy" + fmt.Sprint(i)
		dst.Exec(t, "postgres", "CREATE DATABASE "+db+" OWNER shop")
		if _, err := backup.Restore(ctx, opts(dst, db, st), m.ID, "shop"); err != nil {
			t.Fatalf("%+v restore: %v", c, err)
		}
		if got := dst.Query(t, db, "SELECT count(*) || ':' || sum(hashtext(note)::bigint) FROM orders"); got != want {
			t.Fatalf("%+v restored %s, want %s", c, got, want)
		}
		checks := map[string]string{
			"SELECT tableowner FROM pg_tables WHERE tablename = 'orders'":                    "shop",
			"SELECT tableowner FROM pg_tables WHERE tablename = 'audit'":                     "Audit; Team",
			"SELECT has_table_privilege('reporting', 'orders', 'SELECT')::text":              "true",
			"SELECT has_table_privilege('reporting', 'orders', 'INSERT')::text":              "false",
			"SELECT pg_has_role('analyst', 'reporting', 'MEMBER')::text":                     "true",
			"SELECT array_to_string(rolconfig, ',') FROM pg_roles WHERE rolname = 'analyst'": "work_mem=8MB",
			"SELECT rolcanlogin::text FROM pg_roles WHERE rolname = 'analyst'":               "true",
			"SELECT shobj_description('reporting'::regrole, 'pg_authid')":                    "reads; never writes",
		}
		for q, w := range checks {
			if got := dst.Query(t, db, q); got != w {
				t.Errorf("%+v: %s = %q, want %q", c, q, got, w)
			}
		}
	}
	// Under another owner, that owner owns every object; the grants stay.
	o.Compression = backup.DefaultCompression
	m, err := backup.Run(ctx, o, "20260102T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	dst.Exec(t, "postgres", "CREATE DATABASE other OWNER copy")
	if _, err := backup.Restore(ctx, opts(dst, "other", st), m.ID, "copy"); err != nil {
		t.Fatalf("restore under another owner: %v", err)
	}
	if got := dst.Query(t, "other", "SELECT string_agg(tableowner, ',' ORDER BY tablename) || ':' || has_table_privilege('reporting', 'orders', 'SELECT')::text FROM pg_tables WHERE schemaname = 'public'"); got != "copy,copy:true" {
		t.Fatalf("under another owner: owners and grant %s, want copy,copy:true", got)
	}
	// Nothing of the source's passwords travelled.
	if got := dst.Query(t, "postgres", "SELECT count(*)::text FROM pg_authid WHERE rolpassword IS NOT NULL AND rolname <> 'postgres'"); got != "0" {
		t.Fatalf("%s roles got a password from the backup", got)
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	script := `\restrict abc
--
-- Roles
--
SET default_transaction_read_only = off;
CREATE ROLE "a;b""c";
ALTER ROLE "a;b""c" WITH NOLOGIN; -- trailing; comment
COMMENT ON ROLE x IS E'it''s \'; here';
DO $tag$ BEGIN PERFORM 1; END $tag$;
ALTER ROLE y SET search_path TO 'a;b', "c--d";
\unrestrict abc
`
	want := []string{
		"SET default_transaction_read_only = off;",
		`CREATE ROLE "a;b""c";`,
		`ALTER ROLE "a;b""c" WITH NOLOGIN;`,
		`COMMENT ON ROLE x IS E'it''s \'; here';`,
		"DO $tag$ BEGIN PERFORM 1; END $tag$;",
		`ALTER ROLE y SET search_path TO 'a;b', "c--d";`,
	}
	got := backup.SplitStatements(script)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for stmt, role := range map[string]string{`CREATE ROLE "a;b""c";`: `a;b"c`, "ALTER ROLE analyst WITH LOGIN;": "analyst", "GRANT a TO b;": ""} {
		if got, _ := backup.RoleStatement(stmt); got != role {
			t.Errorf("role of %s = %q, want %q", stmt, got, role)
		}
	}
}
