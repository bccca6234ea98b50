package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Conn is how pg_dump and pg_restore reach PostgreSQL, passed to them as
// libpq environment variables (never as arguments, which ps shows).
type Conn struct {
	Host     string
	Port     int
	User     string
	Password string
	Database string
}

func (c Conn) env() []string {
	env := append(os.Environ(), "PGHOST="+c.Host, "PGPORT="+strconv.Itoa(c.Port), "PGUSER="+c.User,
		"PGDATABASE="+c.Database, "PGCONNECT_TIMEOUT=10")
	if c.Password != "" {
		env = append(env, "PGPASSWORD="+c.Password)
	}
	return env
}

func (c Conn) dsn() string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s connect_timeout=10", c.Host, c.Port, c.User, c.Database)
}

// Options are what Run and Restore share.
type Options struct {
	Conn    Conn
	Storage Storage
	Prefix  string
	// Series is whose backups these are.
	Series Series
	// BinDir holds pg_dump and pg_restore; empty means $PATH.
	BinDir string
	// LockWaitTimeout bounds how long pg_dump waits for a table lock (a
	// long ALTER TABLE, say) before it fails; zero means DefaultLockWaitTimeout.
	LockWaitTimeout time.Duration
}

// DefaultLockWaitTimeout is how long a backup waits for a table lock.
const DefaultLockWaitTimeout = 5 * time.Minute

// dumpMagic starts every pg_dump custom-format archive.
const dumpMagic = "PGDMP"

func (o Options) bin(name string) string {
	if o.BinDir == "" {
		return name
	}
	return filepath.Join(o.BinDir, name)
}

// ErrChecksum means the stored data does not match its manifest.
var ErrChecksum = errors.New("checksum mismatch")

// Run streams `pg_dump -Fc` into storage, hashing it on the way, checks
// what was stored, and writes the manifest last. Nothing of the dump
// touches the local disk. Each attempt writes its own data key, so a
// failed attempt deletes only what it wrote; when a manifest for id already
// exists (an earlier attempt got that far), Run returns it and dumps nothing.
func Run(ctx context.Context, o Options, id, daytwoVersion string) (Manifest, error) {
	earlier := manifestKey(o.Prefix, id, o.Series)
	switch _, err := o.Storage.Size(ctx, earlier); {
	case err == nil:
		return readManifest(ctx, o.Storage, earlier)
	case !errors.Is(err, ErrNotFound):
		return Manifest{}, fmt.Errorf("failed to look for an earlier attempt's manifest: %w", err)
	}
	m := Manifest{ID: id, Database: o.Series.Database, Series: o.Series.UID, SeriesName: o.Series.Name,
		Method: MethodLogical, Format: "pg_dump-custom", DataKey: dataKey(o.Prefix, id, o.Series),
		Start: time.Now().UTC(), DaytwoVersion: daytwoVersion}
	var err error
	if m.PGVersion, err = serverVersion(ctx, o.Conn); err != nil {
		return m, err
	}
	if err := dump(ctx, o, &m); err != nil {
		cleanupCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer done()
		_ = o.Storage.Delete(cleanupCtx, m.DataKey)
		return m, err
	}
	if err := writeManifest(ctx, o.Storage, o.Prefix, o.Series, m); err != nil {
		return m, fmt.Errorf("failed to write the manifest: %w", err)
	}
	return m, nil
}

// dump streams pg_dump into m.DataKey and checks that what was stored is a
// whole custom-format archive: the magic bytes, and the stored size equal
// to what pg_dump wrote.
func dump(ctx context.Context, o Options, m *Manifest) error {
	dumpCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	lockWait := o.LockWaitTimeout
	if lockWait == 0 {
		lockWait = DefaultLockWaitTimeout
	}
	cmd := exec.CommandContext(dumpCtx, o.bin("pg_dump"), "--format=custom", "--no-password",
		fmt.Sprintf("--lock-wait-timeout=%d", lockWait.Milliseconds()))
	cmd.Env = o.Conn.env()
	stderr := &tailBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start pg_dump: %w", err)
	}
	h, n, head := sha256.New(), &Counter{}, &headBuffer{max: len(dumpMagic)}
	putErr := o.Storage.Put(ctx, m.DataKey, io.TeeReader(out, io.MultiWriter(h, n, head)))
	if putErr != nil {
		cancel() // pg_dump may be blocked writing to a pipe nobody reads
	}
	waitErr := cmd.Wait()
	switch {
	case putErr != nil:
		return putErr
	case waitErr != nil:
		return fmt.Errorf("pg_dump failed: %w: %s", waitErr, stderr.String())
	case string(head.b) != dumpMagic:
		return fmt.Errorf("pg_dump wrote %d bytes that are not a custom-format archive", n.N)
	}
	stored, err := o.Storage.Size(ctx, m.DataKey)
	if err != nil {
		return fmt.Errorf("failed to check the stored backup: %w", err)
	}
	if stored != n.N {
		return fmt.Errorf("storage holds %d bytes of the backup, pg_dump wrote %d", stored, n.N)
	}
	m.End, m.Bytes, m.SHA256 = time.Now().UTC(), n.N, hex.EncodeToString(h.Sum(nil))
	return nil
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	b   []byte
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Restore streams the backup id (the newest when empty) into pg_restore,
// verifying its SHA-256 and size. The restore runs in one transaction, so a
// failure leaves the target database as it was; a checksum mismatch is
// reported as ErrChecksum even when pg_restore choked on the bad bytes first.
// role, when set, owns every restored object.
func Restore(ctx context.Context, o Options, id, role string) (Manifest, error) {
	m, err := Find(ctx, o.Storage, o.Prefix, o.Series, id)
	if err != nil {
		return m, err
	}
	if m.Method != "" && m.Method != MethodLogical {
		return m, fmt.Errorf("backup %s is a %s backup; pg_restore restores Logical ones only", m.ID, m.Method)
	}
	rc, err := o.Storage.Get(ctx, m.DataKey)
	if err != nil {
		return m, err
	}
	defer func() { _ = rc.Close() }()
	args := []string{"--no-password", "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
		"--dbname=" + o.Conn.Database}
	if role != "" {
		args = append(args, "--role="+role)
	}
	cmd := exec.CommandContext(ctx, o.bin("pg_restore"), args...)
	cmd.Env = o.Conn.env()
	stderr := &tailBuffer{}
	cmd.Stderr = stderr
	h, n := sha256.New(), &Counter{}
	in := io.TeeReader(rc, io.MultiWriter(h, n))
	cmd.Stdin = in
	runErr := cmd.Run()
	// Hash what pg_restore did not read, so the checksum verdict is complete.
	if _, err := io.Copy(io.Discard, in); err != nil && runErr == nil {
		return m, fmt.Errorf("failed to read the backup: %w", err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 || n.N != m.Bytes {
		return m, fmt.Errorf("%w: backup %s has sha256 %s and %d bytes, its manifest says %s and %d bytes",
			ErrChecksum, m.ID, sum, n.N, m.SHA256, m.Bytes)
	}
	if runErr != nil {
		return m, fmt.Errorf("pg_restore failed: %w: %s", runErr, stderr.String())
	}
	return m, nil
}

func serverVersion(ctx context.Context, c Conn) (string, error) {
	cfg, err := pgx.ParseConfig(c.dsn())
	if err != nil {
		return "", err
	}
	cfg.Password = c.Password
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return "", fmt.Errorf("failed to connect to %s:%d: %w", c.Host, c.Port, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var v string
	if err := conn.QueryRow(cctx, "SHOW server_version").Scan(&v); err != nil {
		return "", fmt.Errorf("failed to read the server version: %w", err)
	}
	return v, nil
}

// Counter counts the bytes written through it.
type Counter struct{ N int64 }

func (c *Counter) Write(p []byte) (int, error) { c.N += int64(len(p)); return len(p), nil }

// tailBuffer keeps the last 2kB of a program's stderr for error messages.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	return strings.TrimSpace(string(bytes.ToValidUTF8(t.b, nil)))
}

// DefaultCheckQuery passes when the restored database has a user table.
const DefaultCheckQuery = "SELECT relname FROM pg_stat_user_tables LIMIT 1"

// Check runs query and counts the rows it returns (up to 1000); no rows is
// a failed check.
func Check(ctx context.Context, c Conn, query string) (int, error) {
	cfg, err := pgx.ParseConfig(c.dsn())
	if err != nil {
		return 0, err
	}
	cfg.Password = c.Password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("failed to connect to %s:%d: %w", c.Host, c.Port, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return 0, fmt.Errorf("check query failed: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() && n < 1000 {
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("check query failed: %w", err)
	}
	if n == 0 {
		return 0, errors.New("check query returned no rows")
	}
	return n, nil
}
