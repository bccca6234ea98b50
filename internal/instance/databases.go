package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// handleDatabases applies the declared databases on the primary
// (instanceapi.PathDatabases).
func (m *Manager) handleDatabases(w http.ResponseWriter, r *http.Request) {
	if s := m.Status(); s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning {
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: fmt.Sprintf("databases are applied on the running primary; this instance is a %s in phase %s", s.Role, s.Phase)})
		return
	}
	var req instanceapi.DatabasesRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: "the body is not a DatabasesRequest: " + err.Error()})
		return
	}
	if err := checkDatabaseNames(req.Databases); err != nil {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 50*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, m.localDSN())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: "cannot reach postgres: " + err.Error()})
		return
	}
	defer func() { _ = conn.Close(context.Background()) }()
	res, err := m.applyDatabases(ctx, conn, req.Databases)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: err.Error()})
		return
	}
	for _, d := range res.Databases {
		if len(d.Changed) > 0 || d.Error != "" {
			m.log.Info("Applied a declared database", "database", d.Name, "changed", d.Changed, "error", d.Error)
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// extensionName and versionName are the API schema's patterns for an
// extension's name and version (other names are roleName's).
var (
	extensionName = regexp.MustCompile(`^[a-z_][a-z0-9_-]*$`)
	versionName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// checkDatabaseNames refuses a request whose names the API's schema would
// have: the statements quote them, and a version is a literal.
func checkDatabaseNames(dbs []instanceapi.DeclaredDatabase) error {
	bad := func(what, name string) error { return fmt.Errorf("%s name %q is not one the API allows", what, name) }
	for _, d := range dbs {
		if !roleName.MatchString(d.Name) || (!d.Absent && !roleName.MatchString(d.Owner)) {
			return bad("database or owner", d.Name+"/"+d.Owner)
		}
		for _, s := range d.Schemas {
			if !roleName.MatchString(s.Name) || (!s.Absent && !roleName.MatchString(s.Owner)) {
				return bad("schema or owner", s.Name+"/"+s.Owner)
			}
		}
		for _, e := range d.Extensions {
			if !extensionName.MatchString(e.Name) || (e.Version != "" && !versionName.MatchString(e.Version)) ||
				(e.Schema != "" && !roleName.MatchString(e.Schema)) {
				return bad("extension, version or schema", e.Name+"/"+e.Version+"/"+e.Schema)
			}
		}
	}
	return nil
}

// applyDatabases makes each database as declared, in order: the database
// and its owner (connected to postgres), then its schemas and extensions
// (connected to it). A database PostgreSQL refuses something for gets the
// first message; the rest of it and the others go on.
func (m *Manager) applyDatabases(ctx context.Context, conn *pgx.Conn, dbs []instanceapi.DeclaredDatabase) (instanceapi.DatabasesResult, error) {
	owners := map[string]string{}
	rows, err := conn.Query(ctx, "SELECT datname, pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database")
	if err != nil {
		return instanceapi.DatabasesResult{}, fmt.Errorf("failed to read the databases: %w", err)
	}
	for rows.Next() {
		var name, owner string
		if err := rows.Scan(&name, &owner); err != nil {
			rows.Close()
			return instanceapi.DatabasesResult{}, fmt.Errorf("failed to read the databases: %w", err)
		}
		owners[name] = owner
	}
	if err := rows.Err(); err != nil {
		return instanceapi.DatabasesResult{}, fmt.Errorf("failed to read the databases: %w", err)
	}
	out := make([]instanceapi.DatabaseResult, len(dbs))
	for i, want := range dbs {
		res := &out[i]
		res.Name = want.Name
		owner, exists := owners[want.Name]
		name := pgx.Identifier{want.Name}.Sanitize()
		note := func(err error, changed string) bool {
			if err != nil {
				if res.Error == "" {
					res.Error = pgMessage(err)
				}
				return false
			}
			if changed != "" {
				res.Changed = append(res.Changed, changed)
			}
			return true
		}
		switch {
		case want.Absent && exists:
			// Not in a transaction, and not FORCE: a database someone is
			// connected to is refused, with PostgreSQL's words.
			_, err := conn.Exec(ctx, "DROP DATABASE "+name)
			res.Exists = !note(err, "dropped")
			continue
		case want.Absent:
			continue
		case !exists:
			_, err := conn.Exec(ctx, "CREATE DATABASE "+name+" OWNER "+pgx.Identifier{want.Owner}.Sanitize())
			if !note(err, "created") {
				continue
			}
		case owner != want.Owner:
			_, err := conn.Exec(ctx, "ALTER DATABASE "+name+" OWNER TO "+pgx.Identifier{want.Owner}.Sanitize())
			note(err, "owner")
		}
		res.Exists = true
		m.applyInDatabase(ctx, want, res, note)
	}
	return instanceapi.DatabasesResult{Databases: out}, nil
}

// applyInDatabase makes want's schemas and extensions, connected to it.
func (m *Manager) applyInDatabase(ctx context.Context, want instanceapi.DeclaredDatabase, res *instanceapi.DatabaseResult, note func(error, string) bool) {
	conn, err := pgx.Connect(ctx, m.localDSNFor(want.Name))
	if !note(err, "") {
		return
	}
	defer func() { _ = conn.Close(context.Background()) }()
	schemas := map[string]string{}
	if err := collect(ctx, conn, "SELECT nspname, pg_catalog.pg_get_userbyid(nspowner) FROM pg_catalog.pg_namespace", schemas); !note(err, "") {
		return
	}
	for _, s := range want.Schemas {
		owner, ok := schemas[s.Name]
		name := pgx.Identifier{s.Name}.Sanitize()
		switch {
		case s.Absent && ok:
			_, err := conn.Exec(ctx, "DROP SCHEMA "+name)
			note(err, "schema "+s.Name+" dropped")
		case s.Absent:
		case !ok:
			_, err := conn.Exec(ctx, "CREATE SCHEMA "+name+" AUTHORIZATION "+pgx.Identifier{s.Owner}.Sanitize())
			note(err, "schema "+s.Name+" created")
		case owner != s.Owner:
			_, err := conn.Exec(ctx, "ALTER SCHEMA "+name+" OWNER TO "+pgx.Identifier{s.Owner}.Sanitize())
			note(err, "schema "+s.Name+" owner")
		}
	}
	versions, where := map[string]string{}, map[string]string{}
	read := func() bool {
		clear(versions)
		clear(where)
		rows, err := conn.Query(ctx, "SELECT e.extname, e.extversion, n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace")
		if !note(err, "") {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var name, version, schema string
			if err := rows.Scan(&name, &version, &schema); !note(err, "") {
				return false
			}
			versions[name], where[name] = version, schema
		}
		return note(rows.Err(), "")
	}
	if !read() {
		return
	}
	for _, e := range want.Extensions {
		version, ok := versions[e.Name]
		name := pgx.Identifier{e.Name}.Sanitize()
		switch {
		case e.Absent && ok:
			_, err := conn.Exec(ctx, "DROP EXTENSION "+name)
			note(err, "extension "+e.Name+" dropped")
		case e.Absent:
		case !ok:
			sql := "CREATE EXTENSION " + name
			if e.Schema != "" {
				if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{e.Schema}.Sanitize()); !note(err, "") {
					continue
				}
				sql += " SCHEMA " + pgx.Identifier{e.Schema}.Sanitize()
			}
			if e.Version != "" {
				sql += " VERSION '" + e.Version + "'" // versionName: no quote can be in it
			}
			_, err := conn.Exec(ctx, sql)
			note(err, "extension "+e.Name+" created")
		default:
			if e.Version != "" && version != e.Version {
				_, err := conn.Exec(ctx, "ALTER EXTENSION "+name+" UPDATE TO '"+e.Version+"'")
				note(err, "extension "+e.Name+" updated to "+e.Version)
			}
			if e.Schema != "" && where[e.Name] != e.Schema {
				if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{e.Schema}.Sanitize()); note(err, "") {
					_, err := conn.Exec(ctx, "ALTER EXTENSION "+name+" SET SCHEMA "+pgx.Identifier{e.Schema}.Sanitize())
					note(err, "extension "+e.Name+" moved to "+e.Schema)
				}
			}
		}
	}
	if read() {
		res.Extensions = map[string]string{}
		for _, e := range want.Extensions {
			if v, ok := versions[e.Name]; ok {
				res.Extensions[e.Name] = v
			}
		}
	}
}

// collect reads a two-column query into into.
func collect(ctx context.Context, conn *pgx.Conn, sql string, into map[string]string) error {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		into[k] = v
	}
	return rows.Err()
}

// pgMessage is PostgreSQL's words for err (with its detail), or err.
func pgMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Detail != "" {
			return pgErr.Message + ": " + pgErr.Detail
		}
		return pgErr.Message
	}
	return err.Error()
}
