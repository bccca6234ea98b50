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
