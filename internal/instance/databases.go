package instance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	var req instanceapi.DatabasesRequest
	check := func() error { return checkDatabaseNames(req.Databases) }
	m.serveOnPrimary(w, r, "databases", &req, check, 50*time.Second, "postgres", func(ctx context.Context, conn *pgx.Conn) (any, error) {
		res, err := m.applyDatabases(ctx, conn, req.Databases)
		for _, d := range res.Databases {
			if len(d.Changed) > 0 || d.Error != "" {
				m.log.Info("Applied a declared database", "database", d.Name, "changed", d.Changed, "error", d.Error)
			}
		}
		return res, err
	})
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
		case want.Absent:
			// Databases are never dropped from here: the data would go
			// with a word in a spec, whenever its last session left.
			res.Exists, res.Error = exists, "a database is not dropped by daytwo; DROP DATABASE it yourself"
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
//
// An extension's scripts run with superuser rights, so where they run is
// the rule: a trusted extension (pg_available_extension_versions.trusted)
// is created, updated and dropped as the database's owner (SET ROLE), as
// that owner could do by hand; an untrusted one only in a schema a
// superuser owns (made by daytwo when missing, with USAGE for the owner),
// never in one the owner or anyone else could have planted objects in.
func (m *Manager) applyInDatabase(ctx context.Context, want instanceapi.DeclaredDatabase, res *instanceapi.DatabaseResult, note func(error, string) bool) {
	conn, err := pgx.Connect(ctx, m.localDSNFor(want.Name))
	if !note(err, "") {
		return
	}
	defer func() { _ = conn.Close(context.Background()) }()
	// A statement that waits on the application's locks gives up, instead
	// of queueing the application's own statements behind it.
	if _, err := conn.Exec(ctx, "SET lock_timeout = '5s'; SET statement_timeout = '30s'; SET search_path = pg_catalog"); !note(err, "") {
		return
	}
	schemas := map[string]string{}
	superusers := map[string]bool{}
	if err := collect(ctx, conn, "SELECT nspname, pg_catalog.pg_get_userbyid(nspowner) FROM pg_catalog.pg_namespace", schemas); !note(err, "") {
		return
	}
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_catalog.pg_roles WHERE rolsuper")
	if !note(err, "") {
		return
	}
	for rows.Next() {
		var r string
		if note(rows.Scan(&r), "") {
			superusers[r] = true
		}
	}
	rows.Close()
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
			if note(err, "schema "+s.Name+" created") {
				schemas[s.Name] = s.Owner
			}
		case owner != s.Owner && (owner != "pg_database_owner" || s.Owner != want.Owner):
			// public, owned by pg_database_owner (PostgreSQL 15 on), is
			// the database owner's already.
			_, err := conn.Exec(ctx, "ALTER SCHEMA "+name+" OWNER TO "+pgx.Identifier{s.Owner}.Sanitize())
			if note(err, "schema "+s.Name+" owner") {
				schemas[s.Name] = s.Owner
			}
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
	owner := pgx.Identifier{want.Owner}.Sanitize()
	for _, e := range want.Extensions {
		if e.Absent && e.Name == "plpgsql" {
			note(errors.New("extension plpgsql is PostgreSQL's own and is not dropped"), "")
			continue
		}
		version, ok := versions[e.Name]
		if e.Absent && !ok || !e.Absent && ok && (e.Version == "" || version == e.Version) && (e.Schema == "" || where[e.Name] == e.Schema) {
			continue
		}
		trusted, err := extensionTrusted(ctx, conn, e, version)
		if !note(err, "") {
			continue
		}
		schema := cmp.Or(e.Schema, where[e.Name])
		if trusted {
			schema = cmp.Or(schema, "public")
		} else {
			if schema == "" {
				note(fmt.Errorf("extension %s is not trusted (its scripts need a superuser): give it a schema of its own, which daytwo makes owned by the superuser", e.Name), "")
				continue
			}
			if owner, ok := schemas[schema]; ok && !superusers[owner] {
				note(fmt.Errorf("extension %s is not trusted and schema %s is owned by %s, not a superuser: its scripts would run as superuser among objects %s controls",
					e.Name, schema, owner, owner), "")
				continue
			}
		}
		var sql, changed string
		switch {
		case e.Absent:
			sql, changed = "DROP EXTENSION "+pgx.Identifier{e.Name}.Sanitize(), "extension "+e.Name+" dropped"
		case !ok:
			sql, changed = "CREATE EXTENSION "+pgx.Identifier{e.Name}.Sanitize(), "extension "+e.Name+" created"
			if schema != "" {
				sql += " SCHEMA " + pgx.Identifier{schema}.Sanitize()
			}
			if e.Version != "" {
				sql += " VERSION '" + e.Version + "'" // versionName: no quote can be in it
			}
		case e.Version != "" && version != e.Version:
			sql, changed = "ALTER EXTENSION "+pgx.Identifier{e.Name}.Sanitize()+" UPDATE TO '"+e.Version+"'", "extension "+e.Name+" updated to "+e.Version
		default:
			sql, changed = "ALTER EXTENSION "+pgx.Identifier{e.Name}.Sanitize()+" SET SCHEMA "+pgx.Identifier{schema}.Sanitize(), "extension "+e.Name+" moved to "+schema
		}
		if _, exists := schemas[schema]; !exists && !e.Absent {
			// For a trusted extension, the owner's, as if it made it; for
			// an untrusted one, the superuser's: nobody else can have
			// planted objects in it, and the owner may use what it holds.
			create := "CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize() + " AUTHORIZATION " + owner
			by := want.Owner
			if !trusted {
				create, by = "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+owner, "postgres"
			}
			if _, err := conn.Exec(ctx, create); !note(err, "") {
				continue
			}
			schemas[schema] = by
		}
		if trusted {
			// As the owner, as PostgreSQL lets it for a trusted extension.
			sql = "SET ROLE " + owner + "; " + sql + "; RESET ROLE"
		}
		_, err = conn.Exec(ctx, sql)
		if err != nil {
			_, _ = conn.Exec(ctx, "RESET ROLE")
		}
		note(err, changed)
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

// extensionTrusted says whether extension e (at the version it is asked
// for, else the one installed, else the default) is marked trusted.
func extensionTrusted(ctx context.Context, conn *pgx.Conn, e instanceapi.DeclaredExtension, installed string) (bool, error) {
	var trusted bool
	err := conn.QueryRow(ctx, `SELECT trusted FROM pg_catalog.pg_available_extension_versions v
		WHERE name = $1 AND version = coalesce(nullif($2, ''), nullif($3, ''),
			(SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = $1))`, e.Name, e.Version, installed).Scan(&trusted)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("extension %s %s is not available in this image", e.Name, e.Version)
	}
	return trusted, err
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
