package instance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
)

// RestoreFunc streams a backup into the database conn reaches; role owns
// what it restores. The instance manager runs it against a fresh,
// network-less server and keeps the data directory only when it succeeds.
type RestoreFunc func(ctx context.Context, conn backup.Conn, role string) error

func hasData(pgdata string) bool {
	_, err := os.Stat(filepath.Join(pgdata, "PG_VERSION"))
	return err == nil
}

// initdb creates the data directory dir. Local connections authenticate by
// peer (the superuser, from inside the pod), network ones by scram-sha-256.
func (m *Manager) initdb(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, m.cfg.bin("initdb"), "-D", dir, "--username=postgres",
		"--auth-local=peer", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8", "--data-checksums")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb failed: %w: %s", err, postgres.LastLines(out, 5))
	}
	return nil
}

// cloneFromPrimary takes a base backup of the primary into dir, retrying
// until it answers: a replica's data can always be rebuilt, so leftovers
// are removed.
func (m *Manager) cloneFromPrimary(ctx context.Context, dir string) error {
	if err := m.cfg.writePassFile(); err != nil {
		return err
	}
	for {
		if err := clearDir(dir); err != nil {
			return err
		}
		host, port := m.upstream()
		cmd := exec.CommandContext(ctx, m.cfg.bin("pg_basebackup"), "-h", host, "-p", fmt.Sprint(port),
			"-U", replicationUser, "-D", dir, "-X", "stream", "--checkpoint=fast", "--no-password")
		cmd.Env = append(append(os.Environ(), "PGPASSFILE="+m.cfg.passFile(), "PGCONNECT_TIMEOUT=5"), m.cfg.sslEnv()...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return os.Chmod(dir, 0o700) //nolint:gosec // a directory: 0700 is owner-only
		}
		m.setMessage(fmt.Sprintf("waiting to clone the primary %s: %s", host, postgres.LastLines(out, 1)))
		m.log.Info("Base backup failed; retrying", "primary", host, "output", postgres.LastLines(out, 2))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}

func clearDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("failed to clear %s: %w", dir, err)
		}
	}
	return nil
}

// ensureRoles makes the application owner, its database and the replication
// role exist with the passwords from the Secret. It runs on every start of a
// primary, so a crash between initdb and here, a restore, or a rotated Secret
// all converge. Passwords travel as SCRAM verifiers, never in plain text.
func (m *Manager) ensureRoles(ctx context.Context, conn *pgx.Conn) error {
	appPassword, err := m.cfg.secret(instanceapi.SecretAppPassword)
	if err != nil {
		return err
	}
	replPassword, err := m.cfg.secret(instanceapi.SecretReplicationPassword)
	if err != nil {
		return err
	}
	if err := ensureRole(ctx, conn, m.cfg.Owner, "LOGIN", appPassword); err != nil {
		return err
	}
	if err := ensureRole(ctx, conn, replicationUser, "LOGIN REPLICATION", replPassword); err != nil {
		return err
	}
	// pg_rewind, run by an old primary rejoining as a replica, reads files
	// of this server through these functions as the replication role.
	for _, fn := range []string{"pg_ls_dir(text, boolean, boolean)", "pg_stat_file(text, boolean)",
		"pg_read_binary_file(text)", "pg_read_binary_file(text, bigint, bigint, boolean)"} {
		if _, err := conn.Exec(ctx, "GRANT EXECUTE ON FUNCTION pg_catalog."+fn+" TO "+replicationUser); err != nil {
			return fmt.Errorf("failed to grant %s to %s: %w", fn, replicationUser, err)
		}
	}
	// pg_rewind reads the source's timeline from its control file, which a
	// just-promoted primary updates only at its next checkpoint: the
	// rejoining instance asks for one first.
	if _, err := conn.Exec(ctx, "GRANT pg_checkpoint TO "+replicationUser); err != nil {
		return fmt.Errorf("failed to grant pg_checkpoint to %s: %w", replicationUser, err)
	}
	// A base backup taken from a standby ends once its last segment is
	// archived, which takes the primary finishing it: the backup Job asks.
	if _, err := conn.Exec(ctx, "GRANT EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() TO "+replicationUser); err != nil {
		return fmt.Errorf("failed to grant pg_switch_wal to %s: %w", replicationUser, err)
	}
	// A logical backup reads the roles' password verifiers as the
	// replication role, in this database (a shared catalog's privileges
	// are kept per database). It gains nothing it lacked: it reads every
	// file of the server through a base backup already.
	if _, err := conn.Exec(ctx, "GRANT SELECT ON pg_catalog.pg_authid TO "+replicationUser); err != nil {
		return fmt.Errorf("failed to grant reading pg_authid to %s: %w", replicationUser, err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", m.cfg.Database).Scan(&exists); err != nil {
		return fmt.Errorf("failed to look up database %s: %w", m.cfg.Database, err)
	}
	if !exists {
		sql := fmt.Sprintf("CREATE DATABASE %s OWNER %s", pgx.Identifier{m.cfg.Database}.Sanitize(), pgx.Identifier{m.cfg.Owner}.Sanitize())
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("failed to create database %s: %w", m.cfg.Database, err)
		}
	}
	return nil
}

func ensureRole(ctx context.Context, conn *pgx.Conn, name, options, password string) error {
	verifier, err := postgres.SCRAMVerifier(password)
	if err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("failed to look up role %s: %w", name, err)
	}
	verb := "CREATE"
	if exists {
		verb = "ALTER"
	}
	// The verifier is base64 and '$:' only, so it cannot break the
	// literal; execQuietly keeps it out of the server's log, whatever
	// log_statement the user set.
	sql := fmt.Sprintf("%s ROLE %s %s PASSWORD '%s'", verb, pgx.Identifier{name}.Sanitize(), options, verifier)
	if err := execQuietly(ctx, conn, sql); err != nil {
		return fmt.Errorf("failed to %s role %s: %w", strings.ToLower(verb), name, err)
	}
	return nil
}

// fileExists: path names something, of any kind.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// bootstrap makes a complete data directory in staging, records its
// identity, and swaps it in for PGData.
func (m *Manager) bootstrap(ctx context.Context) error {
	if err := m.refuseToReplaceServedData(ctx); err != nil {
		return err
	}
	dir := m.cfg.staging()
	if err := clearDir(dir); err != nil {
		return err
	}
	var err error
	switch {
	case m.role() == instanceapi.RoleReplica && following(m.holderName()):
		m.log.Info("Restoring the source's base backup: this Database is a replica of another")
		err = m.cloneFromSource(ctx, dir)
	case m.role() == instanceapi.RoleReplica:
		host, _ := m.upstream()
		m.log.Info("Cloning the primary", "primary", host)
		err = m.cloneFromPrimary(ctx, dir)
	case m.cfg.FromBackup && m.recovery == nil && m.restore == nil:
		// The restore init container restores; this container has no
		// storage to restore from. Only a new pod runs it again.
		err = permanentError{fmt.Errorf("%s: there is no data to serve, and only the restore init container may read the backup storage: "+
			"delete the pod to restore again", instanceapi.TerminationRestoreFailed)}
	case m.cfg.FromBackup && m.recovery != nil:
		m.log.Info("Restoring a base backup and the WAL archive", "prefix", m.recovery.Prefix, "target", targetText(m.recovery))
		if err = m.recoverFromArchive(ctx, dir); err != nil {
			err = fmt.Errorf("%s: %w", instanceapi.TerminationRestoreFailed, err)
		}
	case m.cfg.Import != nil:
		m.log.Info("Importing from an existing PostgreSQL", "host", m.cfg.Import.Host, "databases", m.cfg.Import.Databases)
		if err = m.importFrom(ctx, dir); err != nil {
			// Not permanent: the source may come back; the kubelet retries
			// from an empty staging directory.
			err = fmt.Errorf("%s: %w", instanceapi.TerminationImportFailed, err)
		}
	case m.cfg.FromBackup:
		m.log.Info("Restoring from a backup")
		if err = m.restoreFromBackup(ctx, dir); err != nil {
			// Not permanent: storage may come back; the kubelet retries.
			err = fmt.Errorf("%s: %w", instanceapi.TerminationRestoreFailed, err)
		}
	default:
		m.log.Info("Initialising an empty data directory")
		err = m.initdb(ctx, dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	if m.cfg.DatabaseUID != "" {
		id := Identity{DatabaseUID: m.cfg.DatabaseUID, Bootstrap: m.cfg.BootstrapSource, Created: time.Now().UTC()}
		if err := writeIdentity(dir, id); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(m.cfg.PGData); err != nil {
		return fmt.Errorf("failed to replace %s: %w", m.cfg.PGData, err)
	}
	if err := os.Rename(dir, m.cfg.PGData); err != nil {
		return fmt.Errorf("failed to move the bootstrapped data into place: %w", err)
	}
	if err := syncDir(filepath.Dir(m.cfg.PGData)); err != nil {
		return err
	}
	m.sup.bootstrapped = true
	if err := os.Remove(m.cfg.rewinding()); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("failed to remove %s: %w", m.cfg.rewinding(), err)
	}
	m.log.Info("Bootstrap complete", "source", m.cfg.BootstrapSource)
	return nil
}

// checkVersion refuses a data directory written by another major version:
// starting it would fail at best. (A primary upgrades instead, see
// upgradeIfOlder; a replica clones again.)
func (m *Manager) checkVersion(ctx context.Context) error {
	data, err := upgrade.DataMajor(m.cfg.PGData)
	if err != nil {
		return err
	}
	binary, err := upgrade.BinaryMajor(ctx, m.cfg.BinDir)
	if err != nil {
		return err
	}
	if data != binary {
		return permanentError{fmt.Errorf("the data directory is PostgreSQL %s but this image runs PostgreSQL %s", data, binary)}
	}
	return nil
}
