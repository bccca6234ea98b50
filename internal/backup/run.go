package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
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

// connect opens a connection with c.
func (c Conn) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.dsn())
	if err != nil {
		return nil, err
	}
	cfg.Password = c.Password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to %s:%d: %w", c.Host, c.Port, err)
	}
	return conn, nil
}

func (c Conn) dsn() string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s connect_timeout=10", c.Host, c.Port, c.User, c.Database)
}

// Options are what Run and Restore share.
type Options struct {
	Conn    Conn
	Storage Storage
	Prefix  string
	// OnlyConnected backs up the connected database alone, not every
	// other one: the benchmark's measure against pg_dump of one database.
	// Backups daytwo takes never set it.
	OnlyConnected bool
	// Series is whose backups these are.
	Series Series
	// BinDir holds pg_dump and pg_restore; empty means $PATH.
	BinDir string
	// LockWaitTimeout bounds how long pg_dump waits for a table lock (a
	// long ALTER TABLE, say) before it fails; zero means DefaultLockWaitTimeout.
	LockWaitTimeout time.Duration
	// Compression of what Run stores; zero means DefaultCompression.
	Compression Compression
	// Roles, when set, reads the roles with their password verifiers
	// (pg_authid): daytwo's replication role may, the application owner
	// may not. Without it, or when it cannot, the roles are backed up
	// without passwords, and the manifest says so.
	Roles *Conn
}

// RolesPasswordEnv is the variable a backup Job reads the password of
// Options.Roles from.
const RolesPasswordEnv = "DAYTWO_ROLES_PASSWORD"

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

// Run streams `pg_dump -Fc` of the database it connects to, the roles
// (`pg_dumpall --roles-only`) and a dump of each other database into
// storage, compressing and hashing them on the way, checks what was
// stored, and writes the manifest last. Nothing of the dump touches the
// local disk. Each attempt writes its own data keys, so a failed attempt
// deletes only what it wrote; when a manifest for id already exists (an
// earlier attempt got that far), Run returns it and dumps nothing.
func Run(ctx context.Context, o Options, id, daytwoVersion string) (Manifest, error) {
	earlier := manifestKey(o.Prefix, id, o.Series)
	switch _, err := o.Storage.Size(ctx, earlier); {
	case err == nil:
		m, err := readManifest(ctx, o.Storage, earlier)
		if err != nil {
			return m, err
		}
		ok, err := o.Series.trusted(m, earlier)
		if err != nil || !ok || m.ID != id || !m.storedAt(o.Prefix, earlier) {
			// A copy of another backup's manifest put at this run's key
			// would stand for this run, and the next prune would count it.
			return m, errors.Join(fmt.Errorf("%s holds a manifest that is not this run's: %w", earlier, ErrUnauthenticated), err)
		}
		return m, nil
	case !errors.Is(err, ErrNotFound):
		return Manifest{}, fmt.Errorf("failed to look for an earlier attempt's manifest: %w", err)
	}
	c := o.compression()
	if err := c.Check(); err != nil {
		return Manifest{}, err
	}
	m := Manifest{ID: id, Database: o.Series.Database, Series: o.Series.UID, SeriesName: o.Series.Name,
		Method: MethodLogical, Format: "pg_dump-custom", Compression: c.Algorithm, Encrypted: len(o.Series.EncryptionKey) > 0, Owner: o.Conn.User,
		DataKey: dataKey(o.Prefix, id, o.Series), Start: time.Now().UTC(), DaytwoVersion: daytwoVersion}
	var err error
	if m.PGVersion, err = serverVersion(ctx, o.Conn); err != nil {
		return m, err
	}
	// The dump first, then the roles (seconds), then a check that both are
	// still there: a prune running beside a long dump (concurrencyPolicy
	// Allow) deletes objects no manifest names yet, and a manifest must
	// never name a missing object.
	data := Part{Key: m.DataKey}
	roles := Part{Key: strings.TrimSuffix(m.DataKey, dataSuffix) + rolesSuffix}
	lockWait := o.LockWaitTimeout
	if lockWait == 0 {
		lockWait = DefaultLockWaitTimeout
	}
	dumpArgs := []string{"--format=custom", "--compress=0", fmt.Sprintf("--lock-wait-timeout=%d", lockWait.Milliseconds())}
	err = o.stream(ctx, "pg_dump", dumpArgs, &data, dumpMagic)
	if err == nil {
		m.Bytes, m.RawBytes, m.SHA256 = data.Bytes, data.RawBytes, data.SHA256
		m.Roles = &roles
		m.RolePasswords, err = o.dumpRoles(ctx, &roles)
	}
	if err == nil {
		if !o.OnlyConnected {
			m.Databases, err = o.dumpOthers(ctx, m.DataKey, dumpArgs)
		}
	}
	if err == nil {
		for _, p := range m.parts() {
			if size, serr := o.Storage.Size(ctx, p.Key); serr != nil || size != p.Bytes {
				err = errors.Join(fmt.Errorf("%s is gone from storage before the manifest was written (a prune beside this run?)", p.Key), serr)
				break
			}
		}
	}
	if err != nil {
		cleanupCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer done()
		for _, k := range m.keys() {
			_ = o.Storage.Delete(cleanupCtx, k)
		}
		return m, err
	}
	m.End = time.Now().UTC()
	if m, err = writeManifest(ctx, o.Storage, o.Prefix, o.Series, m); err != nil {
		return m, fmt.Errorf("failed to write the manifest: %w", err)
	}
	return m, nil
}

// dumpRoles stores the roles into p, with their password verifiers when
// o.Roles can read them, and says whether it did.
// The grant that lets a role read pg_authid lives in one database (a
// shared catalog's privileges are kept per database): daytwo makes it in
// postgres, so the roles are read there.
func (o Options) dumpRoles(ctx context.Context, p *Part) (bool, error) {
	if o.Roles != nil {
		withPasswords := o
		withPasswords.Conn = *o.Roles
		withPasswords.Conn.Database = "postgres"
		err := withPasswords.stream(ctx, "pg_dumpall", []string{"--roles-only", "--database=postgres"}, p, "")
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, err
		}
	}
	return false, o.stream(ctx, "pg_dumpall", []string{"--roles-only", "--no-role-passwords", "--database=" + o.Conn.Database}, p, "")
}

// Part is one stored object of a backup besides its main data.
type Part struct {
	Key string `json:"key"`
	// Bytes and SHA256 are of what is stored; RawBytes is what the program
	// wrote, before compression.
	Bytes    int64  `json:"bytes"`
	RawBytes int64  `json:"rawBytes"`
	SHA256   string `json:"sha256"`
}

func (o Options) compression() Compression {
	if o.Compression.Algorithm == "" {
		return DefaultCompression
	}
	return o.Compression
}

// stream runs program and streams what it writes, compressed, into p.Key,
// then checks that what was stored is whole: the stored size equal to what
// was written and, when magic is set, the output starting with it.
func (o Options) stream(ctx context.Context, program string, args []string, p *Part, magic string) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(runCtx, o.bin(program), append([]string{"--no-password"}, args...)...)
	cmd.Env = o.Conn.env()
	stderr := &tailBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start %s: %w", program, err)
	}
	// The compressor runs beside the upload, joined by a pipe. It waits
	// for the program too, so that a program that fails aborts the upload
	// instead of completing it with what was written so far.
	pr, pw := io.Pipe()
	raw, head := &Counter{}, &headBuffer{max: len(magic)}
	var copyErr, waitErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Compressed, then encrypted (when the series has a key).
		ew, err := EncryptWriter(o.Series.EncryptionKey, pw)
		var zw io.WriteCloser
		if err == nil {
			zw, err = o.compression().writer(ew)
		}
		if err == nil {
			_, err = io.Copy(zw, io.TeeReader(out, io.MultiWriter(raw, head)))
			err = errors.Join(err, zw.Close(), ew.Close())
		}
		if err != nil {
			cancel() // nothing reads the program's output any more
		}
		copyErr, waitErr = err, cmd.Wait()
		if err != nil {
			waitErr = nil // killed above; the copy's error says why
		}
		if waitErr != nil {
			_ = pw.CloseWithError(fmt.Errorf("%s failed: %w: %s", program, waitErr, stderr.String()))
		} else {
			_ = pw.CloseWithError(copyErr)
		}
	}()
	h, n := sha256.New(), &Counter{}
	putErr := o.Storage.Put(ctx, p.Key, io.TeeReader(pr, io.MultiWriter(h, n)))
	stopped := false
	if putErr != nil {
		select {
		case <-done: // the program's failure failed the upload
		default:
			stopped = true
			cancel() // the program may be blocked writing to a pipe nobody reads
			_ = pr.CloseWithError(putErr)
		}
	}
	<-done
	switch {
	case waitErr != nil && !stopped:
		return fmt.Errorf("%s failed: %w: %s", program, waitErr, stderr.String())
	case putErr != nil:
		return putErr
	case copyErr != nil:
		return fmt.Errorf("failed to compress what %s wrote: %w", program, copyErr)
	case string(head.b) != magic:
		return fmt.Errorf("%s wrote %d bytes that are not a custom-format archive", program, raw.N)
	}
	stored, err := o.Storage.Size(ctx, p.Key)
	if err != nil {
		return fmt.Errorf("failed to check the stored backup: %w", err)
	}
	if stored != n.N {
		return fmt.Errorf("storage holds %d bytes of %s, %d were written", stored, p.Key, n.N)
	}
	p.Bytes, p.RawBytes, p.SHA256 = n.N, raw.N, hex.EncodeToString(h.Sum(nil))
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
// verifying its SHA-256 and size, and then each other database it holds
// into a new database of its name (restoreOthers). Each database's restore
// runs in one transaction, so a failure leaves it as it was; a checksum
// mismatch is reported as ErrChecksum even when pg_restore choked on the
// bad bytes first.
//
// A backup that carries its roles gets them back first (those the target
// lacks; it takes a superuser connection, else they are skipped), and then
// keeps its grants and, when role is empty or the backup's owner, its
// objects' owners. Otherwise role, when set, owns every restored object;
// without roles no grants are restored (their grantees may not exist).
func Restore(ctx context.Context, o Options, id, role string) (Manifest, error) {
	m, err := Find(ctx, o.Storage, o.Prefix, o.Series, id)
	if err != nil {
		return m, err
	}
	if m.Method != "" && m.Method != MethodLogical {
		return m, fmt.Errorf("backup %s is a %s backup; pg_restore restores Logical ones only", m.ID, m.Method)
	}
	withRoles := m.Roles != nil
	if withRoles {
		if withRoles, err = restoreRoles(ctx, o, m); err != nil {
			return m, err
		}
	}
	args := []string{"--no-password", "--exit-on-error", "--single-transaction"}
	if !withRoles || (role != "" && role != m.Owner) {
		args = append(args, "--no-owner")
		if role != "" {
			args = append(args, "--role="+role)
		}
	}
	if !withRoles {
		args = append(args, "--no-privileges")
	}
	if err := restorePart(ctx, o, m, m.dataPart(), args); err != nil {
		return m, err
	}
	return m, restoreOthers(ctx, o, m, args, role)
}

// restorePart streams one stored dump into pg_restore with args, into
// o.Conn.Database, verifying its SHA-256 and size; a checksum mismatch is
// reported as ErrChecksum even when pg_restore choked on the bad bytes first.
func restorePart(ctx context.Context, o Options, m Manifest, p Part, args []string) error {
	id := m.ID
	rc, err := o.Storage.Get(ctx, p.Key)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	if len(o.Series.Key) > 0 {
		if err := checkWhole(rc, id, p); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, o.bin("pg_restore"), append(args, "--dbname="+o.Conn.Database)...)
	cmd.Env = o.Conn.env()
	stderr := &tailBuffer{}
	cmd.Stderr = stderr
	h, n := sha256.New(), &Counter{}
	in := io.TeeReader(rc, io.MultiWriter(h, n))
	verify := func() error {
		// Hash what the decompressor did not read, so the verdict is complete.
		if _, err := io.Copy(io.Discard, in); err != nil {
			return fmt.Errorf("failed to read the backup: %w", err)
		}
		return p.check(id, h, n.N)
	}
	plain, err := DecryptReader(o.Series.EncryptionKey, in, m.Encrypted)
	if err != nil {
		return fmt.Errorf("backup %s: %w", id, err)
	}
	dump, err := decompress(m.Compression, plain)
	if err != nil {
		return err
	}
	// pg_restore gets the last bytes of the archive only once the whole
	// backup matched its checksum: it cannot commit a corrupt one.
	cmd.Stdin = &holdBack{r: dump, hold: 64 << 10, verify: verify}
	runErr := cmd.Run()
	_ = dump.Close()
	if err := verify(); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("pg_restore failed: %w: %s", runErr, Scrub(stderr.String()))
	}
	return nil
}

// check compares what was read of part p of backup id (its hash h and
// size n) with the manifest.
func (p Part) check(id string, h hash.Hash, n int64) error {
	if sum := hex.EncodeToString(h.Sum(nil)); sum != p.SHA256 || n != p.Bytes {
		return fmt.Errorf("%w: backup %s (%s) has sha256 %s and %d bytes, its manifest says %s and %d bytes",
			ErrChecksum, id, p.Key, sum, n, p.SHA256, p.Bytes)
	}
	return nil
}

// checkWhole reads all of part p of backup id and checks it against the
// (authenticated) manifest, then rewinds rc to its start. pg_restore runs
// what an archive holds as it reads it, and some of it (COPY ... TO
// PROGRAM, a sequence's value) a rollback does not undo: with a series
// key, not one byte reaches it before the whole part is proven daytwo's.
// The second read is of the same object: a file stays open, and minio-go
// asks for the ETag it read first (If-Match) when it reads again.
func checkWhole(rc io.ReadCloser, id string, p Part) error {
	rs, ok := rc.(io.ReadSeeker)
	if !ok {
		return fmt.Errorf("backup %s: the storage cannot read %s twice", id, p.Key)
	}
	h := sha256.New()
	n, err := io.Copy(h, rs)
	if err != nil {
		return fmt.Errorf("failed to read backup %s (%s): %w", id, p.Key, err)
	}
	if err := p.check(id, h, n); err != nil {
		return err
	}
	if _, err := rs.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("failed to read backup %s (%s) again: %w", id, p.Key, err)
	}
	return nil
}

// holdBack passes on what r reads except its last hold bytes, which it
// passes on only once verify, called at r's end, says the whole is good.
type holdBack struct {
	r       io.Reader
	hold    int
	verify  func() error
	pending []byte
	chunk   []byte
	done    bool
	err     error
}

func (b *holdBack) Read(p []byte) (int, error) {
	for !b.done && len(b.pending) <= b.hold {
		if b.chunk == nil {
			b.chunk = make([]byte, 256<<10)
		}
		n, err := b.r.Read(b.chunk)
		b.pending = append(b.pending, b.chunk[:n]...)
		if err == io.EOF {
			b.done, b.err = true, b.verify()
		} else if err != nil {
			b.done, b.err = true, err
		}
	}
	free := len(b.pending)
	if !b.done {
		free -= b.hold
	} else if b.err != nil {
		return 0, b.err
	}
	if free == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.pending[:free])
	b.pending = b.pending[n:]
	return n, nil
}

func serverVersion(ctx context.Context, c Conn) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := c.connect(cctx)
	if err != nil {
		return "", err
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
	conn, err := c.connect(ctx)
	if err != nil {
		return 0, err
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
