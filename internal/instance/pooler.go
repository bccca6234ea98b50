package instance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pooler"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// handlePoolerAuth makes the role PgBouncer looks verifiers up as, and
// its function, on the primary (instanceapi.PathPoolerAuth).
func (m *Manager) handlePoolerAuth(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.PoolerAuthRequest
	check := func() error {
		if len(req.Password) < 16 && !req.Absent {
			return errors.New("the pooler's password must be at least 16 characters")
		}
		return nil
	}
	m.serveOnPrimary(w, r, "the pooler's role", &req, check, 20*time.Second, "postgres", func(ctx context.Context, conn *pgx.Conn) (any, error) {
		var changed []string
		var err error
		if req.Absent {
			changed, err = disablePoolerAuth(ctx, conn)
		} else {
			changed, err = EnsurePoolerAuth(ctx, conn, req.Password)
		}
		if len(changed) > 0 {
			m.log.Info("Made the pooler's role and function", "changed", changed)
		}
		return map[string][]string{"changed": changed}, err
	})
}

// disablePoolerAuth keeps the pools' role from logging in once the pools
// are gone.
func disablePoolerAuth(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var login bool
	var stored *string
	err := conn.QueryRow(ctx, "SELECT rolcanlogin, rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1", pooler.AuthUser).Scan(&login, &stored)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !login && stored == nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read role %s: %w", pooler.AuthUser, err)
	}
	if err := execQuietly(ctx, conn, "ALTER ROLE "+pgx.Identifier{pooler.AuthUser}.Sanitize()+" NOLOGIN PASSWORD NULL"); err != nil {
		return nil, err
	}
	return []string{"role disabled"}, nil
}

// poolerAuthFunction answers PgBouncer's auth_query: the verifier of a
// login role a client may connect as, and nothing for the superuser, a
// replication or bypassrls role, daytwo's own roles or an expired one. It
// runs as its owner (the superuser), with a fixed search_path, and only
// daytwo_pooler may call it.
const poolerAuthFunction = `CREATE OR REPLACE FUNCTION daytwo_pooler.get_auth(p_usename text)
	RETURNS TABLE (usename name, passwd text)
	LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
		SELECT rolname, rolpassword FROM pg_catalog.pg_authid
		WHERE rolname = p_usename AND rolcanlogin AND NOT rolsuper AND NOT rolreplication AND NOT rolbypassrls
			AND rolname NOT LIKE 'daytwo\_%' AND rolname NOT IN ('postgres', 'streaming_replica')
			AND (rolvaliduntil IS NULL OR rolvaliduntil > now())
	$$`

// EnsurePoolerAuth makes the pooler's role (login with password, no
// right but the function's), schema and function, and says what changed.
func EnsurePoolerAuth(ctx context.Context, conn *pgx.Conn, password string) ([]string, error) {
	var changed []string
	var exists bool
	var stored *string
	err := conn.QueryRow(ctx, "SELECT true, rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1", pooler.AuthUser).Scan(&exists, &stored)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("failed to read role %s: %w", pooler.AuthUser, err)
	}
	role := pgx.Identifier{pooler.AuthUser}.Sanitize()
	if !exists || stored == nil || !postgres.SCRAMMatches(*stored, password) {
		verifier, err := postgres.SCRAMVerifier(password)
		if err != nil {
			return nil, err
		}
		verb := "ALTER"
		if !exists {
			verb = "CREATE"
		}
		// The verifier is base64 and '$:' only, so it cannot break the literal.
		if err := execQuietly(ctx, conn, verb+" ROLE "+role+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT PASSWORD '"+verifier+"'"); err != nil {
			return nil, err
		}
		changed = append(changed, "role")
	}
	var hasFunction bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'daytwo_pooler' AND p.proname = 'get_auth' AND p.prosrc LIKE '%NOT rolbypassrls%'
			AND NOT pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE'))`).Scan(&hasFunction); err != nil {
		return changed, fmt.Errorf("failed to read the pooler's function: %w", err)
	}
	if hasFunction {
		return changed, nil
	}
	for _, sql := range []string{
		"CREATE SCHEMA IF NOT EXISTS daytwo_pooler AUTHORIZATION postgres",
		"REVOKE ALL ON SCHEMA daytwo_pooler FROM PUBLIC",
		"GRANT USAGE ON SCHEMA daytwo_pooler TO " + role,
		poolerAuthFunction,
		"REVOKE ALL ON FUNCTION daytwo_pooler.get_auth(text) FROM PUBLIC",
		"GRANT EXECUTE ON FUNCTION daytwo_pooler.get_auth(text) TO " + role,
	} {
		if err := execQuietly(ctx, conn, sql); err != nil {
			return changed, err
		}
	}
	return append(changed, "function"), nil
}
