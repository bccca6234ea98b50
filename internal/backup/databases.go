package backup

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// otherDatabases lists the databases a logical backup dumps besides the
// one it connects to, with their owners: every one that takes connections,
// but the templates and postgres (the maintenance database every server
// has). One the backup's role may not read fails the backup, naming it:
// a backup that skipped it would restore without it.
func (o Options) otherDatabases(ctx context.Context) ([]DatabasePart, error) {
	conn, err := o.Conn.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT datname, pg_get_userbyid(datdba) FROM pg_database
		WHERE datallowconn AND NOT datistemplate AND datname <> current_database() AND datname <> 'postgres' ORDER BY datname`)
	if err != nil {
		return nil, fmt.Errorf("failed to list the databases: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DatabasePart, error) {
		var d DatabasePart
		return d, r.Scan(&d.Name, &d.Owner)
	})
}

// dumpOthers dumps each of otherDatabases beside the main dump dataKey,
// each under a key of its own (numbered: a database name may hold any
// character).
func (o Options) dumpOthers(ctx context.Context, dataKey string, args []string) ([]DatabasePart, error) {
	dbs, err := o.otherDatabases(ctx)
	if err != nil {
		return nil, err
	}
	for i := range dbs {
		d := &dbs[i]
		d.Key = fmt.Sprintf("%s.db%d%s", strings.TrimSuffix(dataKey, dataSuffix), i+1, dataSuffix)
		one := o
		one.Conn.Database = d.Name
		if err := one.stream(ctx, "pg_dump", args, &d.Part, dumpMagic); err != nil {
			return dbs[:i+1], fmt.Errorf("failed to dump database %q: %w", d.Name, err)
		}
	}
	return dbs, nil
}

// restoreOthers creates each other database of m, owned as it was when
// its owner exists here (else by the restoring role), and restores its dump
// into it with args. A database that exists already is left alone and
// fails the restore: a restore brings a backup into a new server, and
// never overwrites.
func restoreOthers(ctx context.Context, o Options, m Manifest, args []string, role string) error {
	if len(m.Databases) == 0 {
		return nil
	}
	conn, err := o.Conn.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, d := range m.Databases {
		var exists, ownerExists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1), EXISTS (SELECT FROM pg_roles WHERE rolname = $2)",
			d.Name, d.Owner).Scan(&exists, &ownerExists); err != nil {
			return fmt.Errorf("failed to look for database %q: %w", d.Name, err)
		}
		if exists {
			return fmt.Errorf("database %q of backup %s exists already on this server; a restore never overwrites a database", d.Name, m.ID)
		}
		owner := d.Owner
		if !ownerExists || (role != "" && role != m.Owner) {
			owner = role
		}
		create := "CREATE DATABASE " + pgx.Identifier{d.Name}.Sanitize()
		if owner != "" {
			create += " OWNER " + pgx.Identifier{owner}.Sanitize()
		}
		if _, err := conn.Exec(ctx, create); err != nil {
			return fmt.Errorf("failed to create database %q: %w", d.Name, err)
		}
		one := o
		one.Conn.Database = d.Name
		if err := restorePart(ctx, one, m, d.Part, args); err != nil {
			return fmt.Errorf("database %q: %w", d.Name, err)
		}
	}
	return nil
}
