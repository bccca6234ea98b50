package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// maxRoles bounds the roles dump a restore reads into memory.
const maxRoles = 64 << 20

// restoreRoles creates the roles of a backup's roles dump that the target
// lacks, and says whether it did: creating roles takes a superuser, and
// without one it does nothing. Roles the target has (its superuser, the replication role, the
// owner daytwo created, and PostgreSQL's own) are left as they are: the
// dump's CREATE, ALTER and COMMENT statements about them are skipped.
// Memberships are granted. The dump's checksum is verified before any
// statement runs, and any failing statement fails the restore, naming it.
func restoreRoles(ctx context.Context, o Options, m Manifest) (bool, error) {
	p := m.Roles
	rc, err := o.Storage.Get(ctx, p.Key)
	if err != nil {
		return false, fmt.Errorf("failed to read the roles of backup %s: %w", m.ID, err)
	}
	stored, err := io.ReadAll(io.LimitReader(rc, maxRoles+1))
	_ = rc.Close()
	if err != nil {
		return false, fmt.Errorf("failed to read the roles of backup %s: %w", m.ID, err)
	}
	h := sha256.New()
	h.Write(stored)
	if err := p.check(m.ID, h, int64(len(stored))); err != nil {
		return false, err
	}
	plain, err := DecryptReader(o.Series.EncryptionKey, bytes.NewReader(stored), m.Encrypted)
	if err != nil {
		return false, fmt.Errorf("the roles of backup %s: %w", m.ID, err)
	}
	r, err := decompress(m.Compression, plain)
	if err != nil {
		return false, err
	}
	script, err := io.ReadAll(io.LimitReader(r, maxRoles))
	_ = r.Close()
	if err != nil {
		return false, fmt.Errorf("failed to decompress the roles of backup %s: %w", m.ID, err)
	}

	conn, err := o.Conn.connect(ctx)
	if err != nil {
		return false, fmt.Errorf("restoring roles: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil || !super {
		return false, err
	}
	if err := applyRoles(ctx, conn, string(script)); err != nil {
		return false, fmt.Errorf("restoring the roles of backup %s: %w", m.ID, err)
	}
	return true, nil
}

// applyRoles runs a pg_dumpall --roles-only script, except the statements
// about roles that exist already (the superuser, the replication user, the
// application owner): those keep what daytwo gave them.
func applyRoles(ctx context.Context, conn *pgx.Conn, script string) error {
	existing := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles")
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		existing[n] = true
	}
	rows, err = conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolsuper")
	if err != nil {
		return err
	}
	supers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, stmt := range splitStatements(script) {
		role, ok := roleStatement(stmt)
		if ok && existing[role] {
			continue
		}
		if ok {
			stmt = withoutPowers(stmt)
		} else if stmt, ok = withoutServerGrants(stmt, supers); !ok {
			continue
		}
		if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("%q failed: %w", redactPasswords(stmt), err)
		}
	}
	return nil
}

// powerOff turns off the role attributes that reach past one database: a
// role brought in keeps none of them (only daytwo's postgres is a
// superuser, reachable on the local socket alone).
var powerOff = map[string]string{"SUPERUSER": "NOSUPERUSER", "REPLICATION": "NOREPLICATION", "BYPASSRLS": "NOBYPASSRLS",
	"CREATEROLE": "NOCREATEROLE"}

// serverRoles are the predefined roles whose members reach the server
// itself: they run programs as it, or read and write its files.
var serverRoles = []string{"pg_execute_server_program", "pg_read_server_files", "pg_write_server_files"}

// withoutServerGrants drops, from a GRANT of roles (a membership), the
// roles a restored role may not join: serverRoles and the superusers of
// this server. It says whether anything is left to run; any other
// statement passes as it is.
func withoutServerGrants(stmt string, supers []string) (string, bool) {
	rest, ok := strings.CutPrefix(stmt, "GRANT ")
	if !ok {
		return stmt, true
	}
	list, tail, ok := strings.Cut(rest, " TO ")
	if !ok || strings.Contains(list, " ON ") {
		return stmt, true // a privilege on an object, not a membership
	}
	var keep []string
	for _, r := range strings.Split(list, ",") {
		name := identifier(strings.TrimSpace(r))
		if !slices.Contains(serverRoles, name) && !slices.Contains(supers, name) {
			keep = append(keep, strings.TrimSpace(r))
		}
	}
	if len(keep) == 0 {
		return "", false
	}
	return "GRANT " + strings.Join(keep, ", ") + " TO " + tail, true
}

// withoutPowers turns powers off in a CREATE or ALTER ROLE statement, up
// to its PASSWORD literal (never rewritten).
func withoutPowers(stmt string) string {
	head, tail := stmt, ""
	if i := strings.Index(stmt, " PASSWORD "); i >= 0 {
		head, tail = stmt[:i], stmt[i:]
	}
	words := strings.Split(head, " ")
	for i, w := range words {
		core := strings.TrimSuffix(w, ";")
		if off, ok := powerOff[core]; ok {
			words[i] = off + w[len(core):]
		}
	}
	return strings.Join(words, " ") + tail
}

var passwordLiteral = regexp.MustCompile(`PASSWORD '(?:[^']|'')*'`)

// redactPasswords hides password literals (hashes, which some methods
// accept as passwords) in a statement quoted by an error.
func redactPasswords(stmt string) string {
	return passwordLiteral.ReplaceAllString(stmt, "PASSWORD '<redacted>'")
}

// roleStatement returns the role a CREATE ROLE, ALTER ROLE or COMMENT ON
// ROLE statement is about.
func roleStatement(stmt string) (string, bool) {
	for _, p := range []string{"CREATE ROLE ", "ALTER ROLE ", "COMMENT ON ROLE "} {
		if rest, ok := strings.CutPrefix(stmt, p); ok {
			return identifier(rest), true
		}
	}
	return "", false
}

// identifier reads the SQL identifier s starts with: a quoted one with its
// doubled quotes undone, or a bare one up to a space or semicolon.
func identifier(s string) string {
	if !strings.HasPrefix(s, `"`) {
		end := strings.IndexAny(s, " ;")
		if end < 0 {
			return s
		}
		return s[:end]
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] == '"' {
			if i+1 < len(s) && s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			break
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitStatements splits a SQL script into its statements, dropping
// comments and blank ones. It knows single-quoted strings (with E”
// escapes), quoted identifiers, dollar quotes, comments and psql
// meta-commands (skipped): what pg_dumpall writes.
func splitStatements(script string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for i := 0; i < len(script); i++ {
		c := script[i]
		switch {
		case c == '-' && strings.HasPrefix(script[i:], "--"),
			c == '\\' && strings.TrimSpace(cur.String()) == "":
			// A comment, or a psql meta-command such as the \restrict and
			// \unrestrict that pg_dumpall writes since 15.14: not SQL.
			end := strings.IndexByte(script[i:], '\n')
			if end < 0 {
				i = len(script)
			} else {
				i += end
			}
			cur.WriteByte('\n')
		case c == '\'' || c == '"':
			escapes := c == '\'' && i > 0 && (script[i-1] == 'E' || script[i-1] == 'e')
			j := i + 1
			for ; j < len(script); j++ {
				if escapes && script[j] == '\\' {
					j++
					continue
				}
				if script[j] == c {
					if j+1 < len(script) && script[j+1] == c {
						j++
						continue
					}
					break
				}
			}
			j = min(j, len(script)-1)
			cur.WriteString(script[i : j+1])
			i = j
		case c == '$':
			tagEnd := strings.IndexByte(script[i+1:], '$')
			tag := ""
			if tagEnd >= 0 {
				tag = script[i : i+tagEnd+2]
			}
			if tag == "" || strings.ContainsAny(tag[1:len(tag)-1], " \t\n;'\"") {
				cur.WriteByte(c)
				continue
			}
			end := strings.Index(script[i+len(tag):], tag)
			if end < 0 {
				cur.WriteString(script[i:])
				i = len(script)
				continue
			}
			stop := i + len(tag) + end + len(tag)
			cur.WriteString(script[i:stop])
			i = stop - 1
		case c == ';':
			cur.WriteByte(c)
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}
