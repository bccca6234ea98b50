package instance_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// Declared roles on a real primary: made, used (a read-only role cannot
// write), left alone when nothing drifted, put back after changes by hand
// (attributes, superuser, password, memberships), dropped when absent
// unless they own objects, and never a password or verifier in the
// server's log, with every statement logged.
func TestDeclaredRolesAreMadeKeptAndDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := newInstance(t)
	in.writeFile("secrets/api-token", apiToken)
	in.setParameters(map[string]string{"log_statement": "all"})
	in.logs = &testpg.SyncBuffer{}
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY)")

	until := time.Now().Add(48 * time.Hour).Truncate(time.Second).UTC()
	roles := []instanceapi.DeclaredRole{
		{Name: "writer", Login: true, Inherit: true, ConnectionLimit: -1, Password: "writer-pass-1", InRoles: []string{"pg_read_all_data", "pg_write_all_data"}},
		{Name: "analytics", Login: true, Inherit: true, ConnectionLimit: 5, Password: "analytics-pass-1", InRoles: []string{"pg_read_all_data"}, ValidUntil: &until},
		{Name: "reporting", Inherit: true, ConnectionLimit: -1},
	}
	apply := func(want ...string) (res instanceapi.RolesResult) {
		t.Helper()
		applyDeclared(t, in, instanceapi.PathRoles, instanceapi.RolesRequest{Roles: roles}, &res, want...)
		return res
	}
	apply("analytics: created", "analytics: membership in pg_read_all_data", "reporting: created", "writer: created",
		"writer: membership in pg_read_all_data", "writer: membership in pg_write_all_data")

	// The read-only role reads and cannot write; the writer writes.
	if err := in.execAs(ctx, "writer", "writer-pass-1", "INSERT INTO items VALUES (1)"); err != nil {
		t.Fatalf("the writer cannot write: %v", err)
	}
	// An error, to find in the log at the end as PostgreSQL's own record.
	if err := in.execAs(ctx, "writer", "writer-pass-1", "SELECT 1/0"); err == nil {
		t.Fatal("1/0 answered")
	}
	if err := in.execAs(ctx, "analytics", "analytics-pass-1", "SELECT count(*) FROM items"); err != nil {
		t.Fatalf("the read-only role cannot read: %v", err)
	}
	if err := in.execAs(ctx, "analytics", "analytics-pass-1", "INSERT INTO items VALUES (2)"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the read-only role wrote, or failed otherwise: %v", err)
	}

	// Nothing drifted: nothing changes (the passwords are checked against
	// the stored verifiers, not set again).
	apply()

	// Changes by hand are put back.
	for _, sql := range []string{
		"ALTER ROLE analytics CREATEDB CONNECTION LIMIT 50 VALID UNTIL 'infinity'",
		"ALTER ROLE analytics PASSWORD 'changed-by-hand'",
		"REVOKE pg_read_all_data FROM analytics",
		"GRANT reporting TO analytics",
		"ALTER ROLE writer SUPERUSER",
		"GRANT pg_write_all_data TO writer WITH ADMIN OPTION",
	} {
		in.superuser(sql)
	}
	apply("analytics: createdb", "analytics: connection limit", "analytics: valid until", "analytics: password",
		"analytics: membership in pg_read_all_data", "analytics: membership in reporting", "writer: superuser",
		"writer: admin option on pg_write_all_data")
	if err := in.execAs(ctx, "analytics", "analytics-pass-1", "SELECT count(*) FROM items"); err != nil {
		t.Fatalf("the declared password and membership were not put back: %v", err)
	}
	if err := in.execAs(ctx, "analytics", "changed-by-hand", "SELECT 1"); err == nil {
		t.Fatal("the password set by hand still works")
	}
	if got := in.superuser("SELECT rolsuper::text || ':' || (SELECT rolconnlimit FROM pg_roles WHERE rolname = 'analytics')::text FROM pg_roles WHERE rolname = 'writer'"); got != "false:5" {
		t.Fatalf("writer superuser, analytics connection limit = %s, want false:5", got)
	}

	// A rotation of writer's password: its twin logs in with the new one
	// and acts as writer (what it makes is writer's), while the old one
	// keeps working; once the grace period ends, writer's login is
	// refused and its sessions are ended, the twin's are not.
	roles = append(roles, instanceapi.DeclaredRole{Name: "writer_alt", Login: true, Inherit: true, ConnectionLimit: -1,
		Password: "writer-pass-2", InRoles: []string{"writer"}, ActAs: "writer"})
	roles[0].Password, roles[0].KeepPassword = "", true
	apply("writer_alt: created", "writer_alt: membership in writer", "writer_alt: acts as")
	twin, err := in.connect(ctx, "writer_alt", "writer-pass-2", "orders")
	if err != nil {
		t.Fatalf("the twin cannot log in with the new password: %v", err)
	}
	defer func() { _ = twin.Close(ctx) }()
	in.superuserIn("orders", "CREATE SCHEMA writers AUTHORIZATION writer")
	if _, err := twin.Exec(ctx, "CREATE TABLE writers.made_by_twin (id int)"); err != nil {
		t.Fatal(err)
	}
	var actsAs string
	if err := twin.QueryRow(ctx, "SELECT current_user").Scan(&actsAs); err != nil || actsAs != "writer" {
		t.Fatalf("the twin acts as %q (%v), want writer", actsAs, err)
	}
	if got := in.superuserIn("orders", "SELECT tableowner FROM pg_tables WHERE tablename = 'made_by_twin'"); got != "writer" {
		t.Fatalf("the twin's table is owned by %q, want writer", got)
	}
	old, err := in.connect(ctx, "writer", "writer-pass-1", "orders")
	if err != nil {
		t.Fatalf("the previous password stopped working within its grace period: %v", err)
	}
	defer func() { _ = old.Close(ctx) }()
	apply()
	roles[0].Login, roles[0].KeepPassword, roles[0].EndSessions = false, false, true
	apply("writer: login", "writer: password", "writer: sessions ended")
	if err := old.Ping(ctx); err == nil {
		t.Fatal("a session of the previous login survived the end of its grace period")
	}
	if err := in.execAs(ctx, "writer", "writer-pass-1", "SELECT 1"); err == nil {
		t.Fatal("the previous password still works after its grace period")
	}
	if _, err := twin.Exec(ctx, "INSERT INTO writers.made_by_twin VALUES (1)"); err != nil {
		t.Fatalf("the twin's session was ended with the previous login's: %v", err)
	}
	in.superuserIn("orders", "DROP SCHEMA writers CASCADE")

	// A role that owns objects in the application database is not
	// dropped: PostgreSQL says which, and the role can no longer log in;
	// one that owns nothing is dropped.
	in.superuserIn("orders", "CREATE TABLE owned (id int); ALTER TABLE owned OWNER TO writer")
	roles[0] = instanceapi.DeclaredRole{Name: "writer", Absent: true}
	roles[2] = instanceapi.DeclaredRole{Name: "reporting", Absent: true}
	roles[3] = instanceapi.DeclaredRole{Name: "writer_alt", Absent: true}
	res := apply("reporting: dropped", "writer_alt: dropped",
		"writer failed: role \"writer\" cannot be dropped because some objects depend on it: owner of table owned")
	if !res.Roles[0].Exists || res.Roles[2].Exists {
		t.Fatalf("after the drops: writer exists %v (want true), reporting exists %v (want false)", res.Roles[0].Exists, res.Roles[2].Exists)
	}
	if err := in.execAs(ctx, "writer", "writer-pass-1", "SELECT 1"); err == nil {
		t.Fatal("a role declared Absent, whose drop was refused, can still log in")
	}
	in.superuserIn("orders", "DROP TABLE owned")
	apply("writer: dropped")

	// Membership in a role that reaches the server is refused, even if the
	// API's checks were passed by.
	var res2 instanceapi.RolesResult
	post(t, in, instanceapi.PathRoles, apiToken, instanceapi.RolesRequest{Roles: []instanceapi.DeclaredRole{
		{Name: "sneaky", Inherit: true, ConnectionLimit: -1, InRoles: []string{"pg_execute_server_program"}},
		{Name: "sneakier", Inherit: true, ConnectionLimit: -1, InRoles: []string{"postgres"}},
	}}, &res2)
	if len(res2.Roles) != 2 || !strings.Contains(res2.Roles[0].Error, "membership in pg_execute_server_program is refused") ||
		!strings.Contains(res2.Roles[1].Error, "membership in postgres is refused") {
		t.Fatalf("memberships that reach the server: %+v", res2.Roles)
	}
	if got := in.superuser("SELECT count(*) FROM pg_auth_members WHERE member IN (SELECT oid FROM pg_roles WHERE rolname IN ('sneaky', 'sneakier'))"); got != "0" {
		t.Fatalf("%s forbidden memberships were granted", got)
	}

	// A role of that name made by hand is not taken for a rotation twin.
	in.superuser("CREATE ROLE analytics_alt LOGIN PASSWORD 'someone-elses'")
	var res3 instanceapi.RolesResult
	post(t, in, instanceapi.PathRoles, apiToken, instanceapi.RolesRequest{Roles: []instanceapi.DeclaredRole{
		{Name: "analytics_alt", Login: true, Inherit: true, ConnectionLimit: -1, Password: "taken-over", InRoles: []string{"analytics"}, ActAs: "analytics"},
	}}, &res3)
	if len(res3.Roles) != 1 || !strings.Contains(res3.Roles[0].Error, "is not analytics's rotation twin") {
		t.Fatalf("a hand-made analytics_alt: %+v", res3.Roles)
	}
	if err := in.execAs(ctx, "analytics_alt", "someone-elses", "SELECT 1"); err != nil {
		t.Fatalf("the hand-made role was changed: %v", err)
	}

	// Without the API token, nothing.
	if code := post(t, in, instanceapi.PathRoles, "wrong-token", instanceapi.RolesRequest{Roles: roles}, nil); code != http.StatusUnauthorized {
		t.Fatalf("POST %s with a wrong token answered %d, want 401", instanceapi.PathRoles, code)
	}

	log := in.logs.String()
	if !strings.Contains(log, "GRANT reporting TO analytics") {
		t.Fatal("the server did not log statements: the check below would prove nothing")
	}
	for _, secret := range []string{"writer-pass-1", "analytics-pass-1", "SCRAM-SHA-256$"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
	checkOneJSONStream(t, log)
}

// checkOneJSONStream checks that the manager's output is one stream of
// JSON lines, PostgreSQL's among them as its own jsonlog records: the
// statements log_statement logs, and the error of SELECT 1/0 at level
// error with its SQLSTATE and statement.
func checkOneJSONStream(t *testing.T, log string) {
	t.Helper()
	var statements int
	var divided bool
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var l struct {
			Level, TS, Logger, Msg string
			Record                 map[string]any
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Level == "" || l.TS == "" {
			t.Errorf("not a line of the JSON stream: %s", line)
			continue
		}
		if l.Logger != "postgres" || l.Record == nil {
			continue
		}
		if strings.HasPrefix(l.Msg, "statement: ") && l.Record["error_severity"] == "LOG" && l.Level == "info" {
			statements++
		}
		if l.Level == "error" && l.Record["state_code"] == "22012" && l.Record["statement"] == "SELECT 1/0" && l.Record["user"] == "writer" {
			divided = true
		}
	}
	if statements == 0 || !divided {
		t.Errorf("PostgreSQL's records: %d statements logged, the division by zero found: %v", statements, divided)
	}
}

// execAs runs sql as user on the orders database.
func (in *instance) execAs(ctx context.Context, user, password, sql string) error {
	c, err := in.connect(ctx, user, password, "orders")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	_, err = c.Exec(ctx, sql)
	return err
}

// applyDeclared posts body (roles or databases) to path, decodes the
// answer into out, and fails unless what it changed and refused, as
// "<name>: <change>" and "<name> failed: <error>", is want.
func applyDeclared(t *testing.T, in *instance, path string, body, out any, want ...string) {
	t.Helper()
	var data json.RawMessage
	if code := post(t, in, path, apiToken, body, &data); code != http.StatusOK {
		t.Fatalf("POST %s answered %d", path, code)
	}
	var outcomes map[string][]struct {
		Name    string   `json:"name"`
		Changed []string `json:"changed"`
		Error   string   `json:"error"`
	}
	if err := json.Unmarshal(data, &outcomes); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, list := range outcomes {
		for _, o := range list {
			for _, c := range o.Changed {
				got = append(got, o.Name+": "+c)
			}
			if o.Error != "" {
				got = append(got, o.Name+" failed: "+o.Error)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("POST %s changed %q, want %q", path, got, want)
	}
}
