package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// handleRoles applies the declared roles on the primary (instanceapi.PathRoles).
func (m *Manager) handleRoles(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.RolesRequest
	check := func() error {
		for _, role := range req.Roles {
			if !roleName.MatchString(role.Name) || len(role.Name) > 63 {
				return fmt.Errorf("role name %q is not lower case letters, digits and underscores", role.Name)
			}
		}
		return nil
	}
	// In the application database: a role that owns objects there is
	// refused a drop with their names, not a count.
	m.serveOnPrimary(w, r, "roles", &req, check, 20*time.Second, m.cfg.Database, func(ctx context.Context, conn *pgx.Conn) (any, error) {
		res, err := applyRoles(ctx, conn, req.Roles)
		for _, rr := range res.Roles {
			if len(rr.Changed) > 0 || rr.Error != "" {
				m.log.Info("Applied a declared role", "role", rr.Name, "changed", rr.Changed, "error", rr.Error)
			}
		}
		return res, err
	})
}

// roleName is a declared role's name, as the API's schema has it.
var roleName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// liveRole is a role as pg_authid has it.
type liveRole struct {
	login, createDB, inherit, super, createRole, replication, bypassRLS bool
	connLimit                                                           int32
	validUntil                                                          pgtype.Timestamptz
	password                                                            *string
	memberOf                                                            map[string]membership
	// actAs is the role its logins SET ROLE to (pg_db_role_setting), or "".
	actAs string
}

// membership is a role's membership in another, as pg_auth_members has it.
type membership struct {
	grantor string
	admin   bool
	// inherit is the grant's own inheritance (PostgreSQL 16 on; before,
	// the member's rolinherit decides, and this is nil).
	inherit *bool
}

// applyRoles makes roles as declared: the present ones first (created,
// then altered where they drifted), then their memberships (so a role may
// be a member of one declared after it), then the absent ones dropped. A
// role PostgreSQL refuses gets its message; the others go on.
func applyRoles(ctx context.Context, conn *pgx.Conn, roles []instanceapi.DeclaredRole) (instanceapi.RolesResult, error) {
	live, err := readRoles(ctx, conn)
	if err != nil {
		return instanceapi.RolesResult{}, err
	}
	out := make([]instanceapi.RoleResult, len(roles))
	for i, want := range roles {
		out[i].Name = want.Name
		if want.Absent {
			continue
		}
		have, ok := live[want.Name]
		if want.ActAs != "" && ok && have.actAs == "" {
			// Not a twin daytwo made (it sets role at once): someone's own.
			out[i].Exists, out[i].Error = true, fmt.Sprintf("role %s exists and is not %s's rotation twin (its logins do not SET ROLE %s); drop or rename it",
				want.Name, want.ActAs, want.ActAs)
			continue
		}
		changed, sql, err := roleStatement(want, have, ok)
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		if sql != "" {
			if err := execQuietly(ctx, conn, sql); err != nil {
				out[i].Error = err.Error()
				out[i].Exists = ok
				continue
			}
		}
		out[i].Exists, out[i].Changed = true, changed
	}
	for i, want := range roles {
		if want.Absent || out[i].Error != "" {
			continue
		}
		var have map[string]membership // a role just made has none
		if l := live[want.Name]; l != nil {
			have = l.memberOf
		}
		changed, err := applyMemberships(ctx, conn, want, have, live)
		out[i].Changed = append(out[i].Changed, changed...)
		if err == nil {
			changed, err = applyActAs(ctx, conn, want, live[want.Name])
			out[i].Changed = append(out[i].Changed, changed...)
		}
		if err != nil {
			out[i].Error = err.Error()
		}
	}
	for i, want := range roles {
		if !want.Absent {
			continue
		}
		if _, ok := live[want.Name]; !ok {
			continue
		}
		if err := dropRole(ctx, conn, want.Name); err != nil {
			out[i].Exists, out[i].Error = true, err.Error()
			continue
		}
		out[i].Changed = []string{"dropped"}
	}
	for i, want := range roles {
		if !want.EndSessions || out[i].Error != "" {
			continue
		}
		var ended int
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid)) FROM pg_catalog.pg_stat_activity
			WHERE usename = $1 AND pid <> pg_catalog.pg_backend_pid()`, want.Name).Scan(&ended); err != nil {
			out[i].Error = fmt.Sprintf("its sessions could not be ended: %v", err)
		} else if ended > 0 {
			out[i].Changed = append(out[i].Changed, "sessions ended")
		}
	}
	return instanceapi.RolesResult{Roles: out}, nil
}

// applyActAs makes the role's logins SET ROLE to want.ActAs (or to
// nobody), after the memberships that allow it.
func applyActAs(ctx context.Context, conn *pgx.Conn, want instanceapi.DeclaredRole, have *liveRole) ([]string, error) {
	if have != nil && have.actAs == want.ActAs || have == nil && want.ActAs == "" {
		return nil, nil
	}
	sql := "ALTER ROLE " + pgx.Identifier{want.Name}.Sanitize() + " RESET role"
	if want.ActAs != "" {
		sql = "ALTER ROLE " + pgx.Identifier{want.Name}.Sanitize() + " SET role = " + pgx.Identifier{want.ActAs}.Sanitize()
	}
	if err := execQuietly(ctx, conn, sql); err != nil {
		return nil, err
	}
	return []string{"acts as"}, nil
}

// dropRole drops name and ends its sessions. A role PostgreSQL will not
// drop (it owns objects, or holds privileges, in this database or another)
// is kept from logging in meanwhile: Absent means nobody connects as it.
func dropRole(ctx context.Context, conn *pgx.Conn, name string) error {
	role := pgx.Identifier{name}.Sanitize()
	err := execQuietly(ctx, conn, "DROP ROLE "+role)
	if err != nil {
		if lockErr := execQuietly(ctx, conn, "ALTER ROLE "+role+" NOLOGIN PASSWORD NULL"); lockErr != nil {
			return fmt.Errorf("%w; and it could not be kept from logging in: %w", err, lockErr)
		}
	}
	if _, termErr := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = $1", name); termErr != nil && err == nil {
		return fmt.Errorf("dropped, but its sessions could not be ended: %w", termErr)
	}
	return err
}

// readRoles reads every role but PostgreSQL's own, with its memberships.
func readRoles(ctx context.Context, conn *pgx.Conn) (map[string]*liveRole, error) {
	rows, err := conn.Query(ctx, `SELECT rolname, rolcanlogin, rolcreatedb, rolinherit, rolsuper, rolcreaterole, rolreplication, rolbypassrls,
		rolconnlimit, rolvaliduntil, rolpassword FROM pg_catalog.pg_authid WHERE rolname NOT LIKE 'pg\_%'`)
	if err != nil {
		return nil, fmt.Errorf("failed to read the roles: %w", err)
	}
	live := map[string]*liveRole{}
	for rows.Next() {
		var name string
		r := &liveRole{memberOf: map[string]membership{}}
		if err := rows.Scan(&name, &r.login, &r.createDB, &r.inherit, &r.super, &r.createRole, &r.replication, &r.bypassRLS,
			&r.connLimit, &r.validUntil, &r.password); err != nil {
			rows.Close()
			return nil, fmt.Errorf("failed to read the roles: %w", err)
		}
		live[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to read the roles: %w", err)
	}
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return nil, fmt.Errorf("failed to read the server's version: %w", err)
	}
	// Before PostgreSQL 16 a grantor may be a role since dropped, and a
	// grant has no inheritance of its own.
	inherit := "NULL::bool"
	if version >= 160000 {
		inherit = "am.inherit_option"
	}
	rows, err = conn.Query(ctx, `SELECT m.rolname, g.rolname, coalesce(gr.rolname, ''), am.admin_option, `+inherit+`
		FROM pg_catalog.pg_auth_members am
		JOIN pg_catalog.pg_roles m ON m.oid = am.member JOIN pg_catalog.pg_roles g ON g.oid = am.roleid
		LEFT JOIN pg_catalog.pg_roles gr ON gr.oid = am.grantor`)
	if err != nil {
		return nil, fmt.Errorf("failed to read the memberships: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var member, group string
		var m membership
		if err := rows.Scan(&member, &group, &m.grantor, &m.admin, &m.inherit); err != nil {
			return nil, fmt.Errorf("failed to read the memberships: %w", err)
		}
		if r := live[member]; r != nil {
			r.memberOf[group] = m
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to read the memberships: %w", err)
	}
	return live, readActAs(ctx, conn, live)
}

// readActAs reads the role each role's logins SET ROLE to, from the
// settings of the role in every database.
func readActAs(ctx context.Context, conn *pgx.Conn, live map[string]*liveRole) error {
	rows, err := conn.Query(ctx, `SELECT r.rolname, substr(c, 6) FROM pg_catalog.pg_db_role_setting s
		JOIN pg_catalog.pg_roles r ON r.oid = s.setrole, unnest(s.setconfig) AS c
		WHERE s.setdatabase = 0 AND c LIKE 'role=%'`)
	if err != nil {
		return fmt.Errorf("failed to read the roles' settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, actAs string
		if err := rows.Scan(&name, &actAs); err != nil {
			return fmt.Errorf("failed to read the roles' settings: %w", err)
		}
		if r := live[name]; r != nil {
			r.actAs = strings.Trim(actAs, `"`)
		}
	}
	return rows.Err()
}

// roleStatement is the CREATE or ALTER ROLE that makes have as want
// (empty when it already is), and what it changes.
func roleStatement(want instanceapi.DeclaredRole, have *liveRole, exists bool) ([]string, string, error) {
	flag := func(on bool, yes, no string) string {
		if on {
			return yes
		}
		return no
	}
	opts := []string{
		flag(want.Login, "LOGIN", "NOLOGIN"), flag(want.CreateDB, "CREATEDB", "NOCREATEDB"), flag(want.Inherit, "INHERIT", "NOINHERIT"),
		"NOSUPERUSER", "NOCREATEROLE", "NOREPLICATION", "NOBYPASSRLS", fmt.Sprintf("CONNECTION LIMIT %d", want.ConnectionLimit),
	}
	until := "'infinity'"
	if want.ValidUntil != nil {
		until = "'" + want.ValidUntil.UTC().Format(time.RFC3339) + "'"
	}
	opts = append(opts, "VALID UNTIL "+until)
	var changed []string
	setPassword := false
	if !exists {
		changed, setPassword = []string{"created"}, want.Password != ""
	} else {
		for _, c := range []struct {
			what string
			same bool
		}{
			{"login", have.login == want.Login}, {"createdb", have.createDB == want.CreateDB}, {"inherit", have.inherit == want.Inherit},
			{"superuser", !have.super}, {"createrole", !have.createRole}, {"replication", !have.replication}, {"bypassrls", !have.bypassRLS},
			{"connection limit", have.connLimit == want.ConnectionLimit}, {"valid until", sameUntil(have.validUntil, want.ValidUntil)},
		} {
			if !c.same {
				changed = append(changed, c.what)
			}
		}
		switch {
		case want.KeepPassword:
		case want.Password == "" && have.password != nil:
			changed = append(changed, "password")
		case want.Password != "" && (have.password == nil || !postgres.SCRAMMatches(*have.password, want.Password)):
			changed, setPassword = append(changed, "password"), true
		}
		if len(changed) == 0 {
			return nil, "", nil
		}
	}
	switch {
	case setPassword:
		verifier, err := postgres.SCRAMVerifier(want.Password)
		if err != nil {
			return nil, "", err
		}
		// The verifier is base64 and '$:' only, so it cannot break the literal.
		opts = append(opts, "PASSWORD '"+verifier+"'")
	case want.Password == "" && !want.KeepPassword:
		opts = append(opts, "PASSWORD NULL")
	}
	verb := "ALTER"
	if !exists {
		verb = "CREATE"
	}
	return changed, verb + " ROLE " + pgx.Identifier{want.Name}.Sanitize() + " " + strings.Join(opts, " "), nil
}

// sameUntil: the stored expiry is the declared one, to the second (none
// and infinity are the same).
func sameUntil(have pgtype.Timestamptz, want *time.Time) bool {
	none := !have.Valid || have.InfinityModifier == pgtype.Infinity
	if want == nil {
		return none
	}
	return !none && have.Time.Unix() == want.Unix()
}

// applyMemberships grants want the memberships it lacks, without the
// admin option and inheriting as want does, and revokes those it was not
// declared with. A membership in a role that reaches the server is
// refused, whatever the operator asked.
func applyMemberships(ctx context.Context, conn *pgx.Conn, want instanceapi.DeclaredRole, have map[string]membership, live map[string]*liveRole) ([]string, error) {
	var changed []string
	role := pgx.Identifier{want.Name}.Sanitize()
	for _, g := range want.InRoles {
		if why := forbiddenGroup(g, live[g]); why != "" {
			return changed, fmt.Errorf("membership in %s is refused: %s", g, why)
		}
		group := pgx.Identifier{g}.Sanitize()
		m, ok := have[g]
		by := ""
		if m.grantor != "" {
			by = " GRANTED BY " + pgx.Identifier{m.grantor}.Sanitize()
		}
		switch {
		case !ok:
			sql := "GRANT " + group + " TO " + role
			if inheritOption(conn) {
				sql += " WITH INHERIT " + strings.ToUpper(strconv.FormatBool(want.Inherit))
			}
			if err := execQuietly(ctx, conn, sql); err != nil {
				return changed, err
			}
			changed = append(changed, "membership in "+g)
			continue
		case m.admin:
			if err := execQuietly(ctx, conn, "REVOKE ADMIN OPTION FOR "+group+" FROM "+role+by); err != nil {
				return changed, err
			}
			changed = append(changed, "admin option on "+g)
		}
		if m.inherit != nil && *m.inherit != want.Inherit {
			if err := execQuietly(ctx, conn, "GRANT "+group+" TO "+role+" WITH INHERIT "+strings.ToUpper(strconv.FormatBool(want.Inherit))+by); err != nil {
				return changed, err
			}
			changed = append(changed, "inheritance of "+g)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(have)) {
		if slices.Contains(want.InRoles, g) {
			continue
		}
		// By whoever granted it: from PostgreSQL 16 on, a REVOKE by
		// another role leaves the membership in place.
		sql := "REVOKE " + pgx.Identifier{g}.Sanitize() + " FROM " + role
		if grantor := have[g].grantor; grantor != "" {
			sql += " GRANTED BY " + pgx.Identifier{grantor}.Sanitize()
		}
		if err := execQuietly(ctx, conn, sql); err != nil {
			return changed, err
		}
		changed = append(changed, "membership in "+g)
	}
	return changed, nil
}

// forbiddenGroup says why no declared role may be a member of group, or
// "": it would reach the server itself (as v1alpha1.ForbiddenMembership
// says, which the operator checks first), or it is a role with powers a
// declared role is refused.
func forbiddenGroup(group string, l *liveRole) string {
	switch {
	case group == "postgres" || group == replicationUser || strings.HasPrefix(group, "daytwo_"):
		return "it is a role daytwo runs the server with"
	case group == "pg_execute_server_program" || group == "pg_read_server_files" || group == "pg_write_server_files":
		return "it reaches the server's programs or files"
	case l != nil && (l.super || l.replication || l.createRole || l.bypassRLS):
		return "it is a superuser, replication, createrole or bypassrls role"
	}
	return ""
}

// inheritOption says whether the server keeps a grant's inheritance of its
// own (PostgreSQL 16 on).
func inheritOption(conn *pgx.Conn) bool {
	v := conn.PgConn().ParameterStatus("server_version")
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	major, _ := strconv.Atoi(v[:end])
	return major >= 16
}

// execQuietly runs sql in a transaction that keeps it out of the server's
// log (it may carry a password verifier), and answers PostgreSQL's own
// words when it fails, never the statement.
func execQuietly(ctx context.Context, conn *pgx.Conn, sql string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// pg_stat_statements, where loaded, keeps utility statements too.
	if _, err := tx.Exec(ctx, "SET LOCAL log_statement = 'none'; SET LOCAL log_min_error_statement = 'panic'; SET LOCAL log_min_duration_statement = -1; "+
		"SET LOCAL pg_stat_statements.track_utility = off"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			if pgErr.Detail != "" {
				return fmt.Errorf("%s: %s", pgErr.Message, strings.ReplaceAll(pgErr.Detail, "\n", "; "))
			}
			return errors.New(pgErr.Message)
		}
		return errors.New("the statement failed")
	}
	return tx.Commit(ctx)
}
