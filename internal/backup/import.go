package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ImportOptions is one import from a running PostgreSQL (any version this
// image's pg_dump can read: the newest client against an older server).
type ImportOptions struct {
	// Source is the server to read, as a user that may read everything
	// imported (a superuser for roles with their passwords).
	Source Conn
	// Target is the new cluster's superuser on its local socket.
	Target Conn
	// Databases are the databases to copy, each into a database of the
	// same name.
	Databases []string
	// Roles copies the roles first (with their passwords where the source
	// user may read them), so the objects keep their owners and grants.
	Roles bool
	// Owner owns what is imported when Roles is false.
	Owner string
	// BinDir is where pg_dump, pg_dumpall and pg_restore are.
	BinDir string
	// Progress hears what the import is doing.
	Progress func(string)
}

// Import copies the roles and the databases: pg_dump -Fc of each database
// streams into pg_restore in one transaction, and nothing touches the
// disk. A database that exists on the target (the application database
// the bootstrap made) receives the objects; the others are created.
func Import(ctx context.Context, o ImportOptions) error {
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	opts := Options{BinDir: o.BinDir}
	target, err := o.Target.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = target.Close(context.WithoutCancel(ctx)) }()
	if o.Roles {
		progress("importing the roles")
		script, err := dumpRoles(ctx, opts, o.Source)
		if err != nil {
			return err
		}
		if err := applyRoles(ctx, target, script); err != nil {
			return fmt.Errorf("importing the roles: %w", err)
		}
	}
	for i, db := range o.Databases {
		progress(fmt.Sprintf("importing database %s (%d of %d)", db, i+1, len(o.Databases)))
		if err := importDatabase(ctx, o, opts, target, db); err != nil {
			return fmt.Errorf("importing database %s: %w", db, err)
		}
	}
	return nil
}

// dumpRoles is pg_dumpall --roles-only from the source, with the password
// hashes when the source user may read them, without otherwise.
func dumpRoles(ctx context.Context, o Options, src Conn) (string, error) {
	var firstErr error
	for _, extra := range [][]string{nil, {"--no-role-passwords"}} {
		cmd := exec.CommandContext(ctx, o.bin("pg_dumpall"), append([]string{"--roles-only", "--no-password"}, extra...)...)
		cmd.Env = src.env()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil {
			return string(out), nil
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("pg_dumpall --roles-only: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
	}
	return "", firstErr
}

// importDatabase streams one database from the source into the target.
func importDatabase(ctx context.Context, o ImportOptions, opts Options, target *pgx.Conn, db string) error {
	var owner string
	if o.Roles {
		src := o.Source
		src.Database = db
		c, err := src.connect(ctx)
		if err != nil {
			return err
		}
		err = c.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()").Scan(&owner)
		_ = c.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("reading the owner of %s: %w", db, err)
		}
	} else {
		owner = o.Owner
	}
	var exists bool
	if err := target.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := target.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER "+pgx.Identifier{owner}.Sanitize()); err != nil {
			return err
		}
	} else if _, err := target.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER TO "+pgx.Identifier{owner}.Sanitize()); err != nil {
		return err
	}
	src := o.Source
	src.Database = db
	dump := exec.CommandContext(ctx, opts.bin("pg_dump"), "--format=custom", "--compress=0", "--no-password")
	dump.Env = src.env()
	var dumpErr strings.Builder
	dump.Stderr = &dumpErr
	args := []string{"--no-password", "--exit-on-error", "--single-transaction", "--dbname=" + db}
	if !o.Roles {
		args = append(args, "--no-owner", "--no-privileges", "--role="+owner)
	}
	dst := o.Target
	dst.Database = db
	restore := exec.CommandContext(ctx, opts.bin("pg_restore"), args...)
	restore.Env = dst.env()
	var restoreErr strings.Builder
	restore.Stderr = &restoreErr
	pipe, err := dump.StdoutPipe()
	if err != nil {
		return err
	}
	restore.Stdin = pipe
	if err := dump.Start(); err != nil {
		return err
	}
	rerr := restore.Run()
	if rerr != nil {
		// pg_restore stopped reading: pg_dump must not block on the pipe.
		_, _ = io.Copy(io.Discard, pipe)
	}
	derr := dump.Wait()
	if derr != nil {
		derr = fmt.Errorf("pg_dump: %w: %s", derr, lastLine(dumpErr.String()))
	}
	if rerr != nil {
		rerr = fmt.Errorf("pg_restore: %w: %s", rerr, lastLine(restoreErr.String()))
	}
	return errors.Join(derr, rerr)
}

func lastLine(s string) string {
	lines := strings.Split(Scrub(s), "\n")
	return lines[len(lines)-1]
}
