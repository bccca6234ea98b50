package backup_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/backup"
)

// A restored role keeps no power that reaches past its database: not
// CREATEROLE, not membership in a superuser or in the roles that run
// programs or read and write the server's files. So an imported role
// cannot run COPY ... TO PROGRAM, which would run code as the server.
func TestRestoredRolesCannotRunPrograms(t *testing.T) {
	t.Parallel()
	src, st := appServer(t,
		"CREATE ROLE intruder LOGIN CREATEROLE",
		"GRANT pg_execute_server_program, pg_read_server_files, pg_write_server_files TO intruder",
		"GRANT postgres TO intruder",
		"CREATE ROLE reporting NOLOGIN",
		"GRANT reporting TO intruder")
	m, err := backup.Run(ctx, appOptions(src, st), "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	dst := restoreApp(t, st, m.ID)
	checks := map[string]string{
		"SELECT rolcreaterole::text FROM pg_roles WHERE rolname = 'intruder'":         "false",
		"SELECT pg_has_role('intruder', 'pg_execute_server_program', 'MEMBER')::text": "false",
		"SELECT pg_has_role('intruder', 'pg_read_server_files', 'MEMBER')::text":      "false",
		"SELECT pg_has_role('intruder', 'pg_write_server_files', 'MEMBER')::text":     "false",
		"SELECT pg_has_role('intruder', 'postgres', 'MEMBER')::text":                  "false",
		"SELECT pg_has_role('intruder', 'reporting', 'MEMBER')::text":                 "true",
	}
	for q, want := range checks {
		if got := dst.Query(t, "app", q); got != want {
			t.Errorf("%s = %s, want %s", q, got, want)
		}
	}
	// As the restored role itself.
	dst.Exec(t, "postgres", "ALTER ROLE intruder PASSWORD 'in-secret'")
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=intruder dbname=app sslmode=disable", dst.Port))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = "in-secret"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(context.Background(), "COPY (SELECT 1) TO PROGRAM 'true'"); err == nil {
		t.Fatal("a restored role ran COPY ... TO PROGRAM")
	}
}

// A logical backup keeps the roles' password verifiers, so a restored login
// role logs in with the password it had (the roles were dumped without
// passwords, and every restored login role was locked out). The verifiers
// are read as daytwo's replication role, which may read pg_authid; a
// connection that may not (the application owner) backs the roles up
// without them, and the manifest says so.
func TestLogicalBackupKeepsRolePasswords(t *testing.T) {
	t.Parallel()
	src, st := appServer(t, "CREATE ROLE reporter LOGIN PASSWORD 'report-secret'",
		"CREATE ROLE streaming_replica LOGIN REPLICATION PASSWORD 'repl-secret'",
		"GRANT SELECT ON pg_catalog.pg_authid TO streaming_replica")
	verifier := "SELECT coalesce(rolpassword, '') FROM pg_authid WHERE rolname = 'reporter'"
	o := appOptions(src, st)
	replication := o.Conn
	replication.User, replication.Password = "streaming_replica", "repl-secret"
	o.Roles = &replication
	m, err := backup.Run(ctx, o, "20260101T000000Z", "test")
	if err != nil || !m.RolePasswords {
		t.Fatalf("backup: role passwords %v, %v", m.RolePasswords, err)
	}
	dst := restoreApp(t, st, m.ID)
	if got, want := dst.Query(t, "postgres", verifier), src.Query(t, "postgres", verifier); got != want || want == "" {
		t.Fatalf("restored verifier %q, the source's %q", got, want)
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=reporter dbname=app sslmode=disable", dst.Port))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = "report-secret"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("the restored role cannot log in with its password: %v", err)
	}
	_ = conn.Close(ctx)

	owner := o.Conn
	o.Roles = &owner
	m, err = backup.Run(ctx, o, "20260102T000000Z", "test")
	if err != nil || m.RolePasswords {
		t.Fatalf("a backup whose roles connection cannot read pg_authid: role passwords %v, %v", m.RolePasswords, err)
	}
	if got := restoreApp(t, st, m.ID).Query(t, "postgres", verifier); got != "" {
		t.Fatalf("a backup without passwords restored verifier %q", got)
	}
}
