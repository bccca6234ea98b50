// Package testpg starts throwaway PostgreSQL servers and MinIO servers on
// loopback for data-path tests and benchmarks: real servers, temp dirs, free
// ports, stopped at cleanup.
package testpg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir is where the PostgreSQL programs under test are: DAYTWO_PG_BINDIR
// (`make test` sets it to each version's, see hack/pgroot.sh), or Debian
// bookworm's PostgreSQL 15.
func BinDir(t testing.TB) string {
	dir := os.Getenv("DAYTWO_PG_BINDIR")
	if dir == "" {
		dir = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
		t.Fatalf("PostgreSQL programs not found in %s (run `make deps` or set DAYTWO_PG_BINDIR): %v", dir, err)
	}
	return dir
}

// Major is the major version of the PostgreSQL in BinDir ("15", "17"):
// tests that expect version-specific output ask it.
func Major(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(BinDir(t), "postgres"), "--version").Output()
	if err != nil {
		t.Fatalf("postgres --version: %v", err)
	}
	// "postgres (PostgreSQL) 17.12 (Debian 17.12-0+deb13u1)"
	f := strings.Fields(string(out))
	if len(f) < 3 {
		t.Fatalf("postgres --version printed %q", out)
	}
	major, _, _ := strings.Cut(f[2], ".")
	return major
}

// Server is a running PostgreSQL with a superuser "postgres" and Password.
type Server struct {
	Port     int
	Dir      string
	BinDir   string
	Password string
	cmd      *exec.Cmd
	exited   chan error
}

// BinDirOf is where PostgreSQL major's programs are, for tests that need
// two versions at once (a major upgrade): DAYTWO_PG_BINDIR_<major>, or
// where `make deps` puts them (hack/pgroot.sh).
func BinDirOf(t testing.TB, major string) string {
	dir := os.Getenv("DAYTWO_PG_BINDIR_" + major)
	if dir == "" {
		dir = filepath.Join("/var/cache/daytwo/pgroot", major, "usr/lib/postgresql", major, "bin")
		if major == "15" {
			dir = "/usr/lib/postgresql/15/bin"
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
		t.Fatalf("PostgreSQL %s programs not found in %s (run `make deps` or set DAYTWO_PG_BINDIR_%s): %v", major, dir, major, err)
	}
	return dir
}

// Start initialises and starts a server; it stops at cleanup.
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	return StartWith(t, BinDir(t), settings...)
}

// StartWith is Start with the programs in binDir.
func StartWith(t testing.TB, binDir string, settings ...string) *Server {
	t.Helper()
	s := &Server{Port: FreePort(t), Dir: t.TempDir(), BinDir: binDir, Password: "test-superuser-password"}
	ChownToRunner(t, s.Dir)
	pw := filepath.Join(s.Dir, "pw")
	if err := os.WriteFile(pw, []byte(s.Password), 0o600); err != nil {
		t.Fatal(err)
	}
	ChownToRunner(t, pw)
	data := filepath.Join(s.Dir, "data")
	initdb := exec.Command(filepath.Join(s.BinDir, "initdb"), "-D", data, "-U", "postgres", "--pwfile", pw,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8")
	initdb.SysProcAttr = RunnerCredential(t)
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.run(t, data, settings)
	return s
}

// StartOn starts a server on an existing data directory (a restored copy
// of a Start server, so the same superuser password); it stops at cleanup.
func StartOn(t testing.TB, data string, settings ...string) *Server {
	t.Helper()
	return StartOnWith(t, BinDir(t), data, settings...)
}

// StartOnWith is StartOn with the programs in binDir.
func StartOnWith(t testing.TB, binDir, data string, settings ...string) *Server {
	t.Helper()
	s := &Server{Port: FreePort(t), Dir: t.TempDir(), BinDir: binDir, Password: "test-superuser-password"}
	ChownToRunner(t, s.Dir)
	s.run(t, data, settings)
	return s
}

// run starts postgres on data and waits until it accepts connections.
func (s *Server) run(t testing.TB, data string, settings []string) {
	t.Helper()
	args := []string{"-D", data, "-p", strconv.Itoa(s.Port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.Dir, "-c", "fsync=off", "-c", "full_page_writes=off"}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	s.cmd = exec.Command(filepath.Join(s.BinDir, "postgres"), args...)
	s.cmd.SysProcAttr = RunnerCredential(t)
	logf, _ := os.Create(filepath.Join(s.Dir, "postgres.log"))
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.Stop()
		_ = logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := s.Connect(context.Background(), "postgres")
		if err == nil {
			_ = conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
			t.Fatalf("PostgreSQL did not start: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop shuts the server down cleanly (fast shutdown) and waits for it; a
// stopped server stays stopped.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	<-s.exited
}

// DataDir is the server's data directory (Start's).
func (s *Server) DataDir() string { return filepath.Join(s.Dir, "data") }

// Connect opens a superuser connection to database db.
func (s *Server) Connect(ctx context.Context, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", s.Port, db))
	if err != nil {
		return nil, err
	}
	cfg.Password = s.Password
	return pgx.ConnectConfig(ctx, cfg)
}

// Exec runs SQL in database db and fails the test on error.
func (s *Server) Exec(t testing.TB, db, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Query returns the first column of the first row as text.
func (s *Server) Query(t testing.TB, db, sql string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := s.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var v string
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// Pgbench fills database db with pgbench's tables at scale (about 15 MB
// each), as the superuser, with the server's own pgbench.
func (s *Server) Pgbench(t testing.TB, db string, scale int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.BinDir, "pgbench"), "-i", "-q", "-s", strconv.Itoa(scale), db)
	cmd.Env = s.Env(db)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i -s %d %s: %v\n%s", scale, db, err, out)
	}
}

// Env is the libpq environment that reaches database db as the superuser.
func (s *Server) Env(db string) []string {
	return append(os.Environ(), "PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(s.Port), "PGUSER=postgres",
		"PGPASSWORD="+s.Password, "PGDATABASE="+db)
}

// FreePort returns a loopback TCP port nobody listens on, and no other
// test process was given. Test binaries of several packages run at once
// (and make test runs one package against several PostgreSQL versions at
// once): a port checked free here could be checked free there too, before
// either binds it. So each port given is also claimed across processes, by
// a lock (flock) on a file named after it, held until this process ends,
// when the kernel releases it.
func FreePort(t testing.TB) int {
	portsMu.Lock()
	defer portsMu.Unlock()
	dir := filepath.Join(os.TempDir(), "daytwo-test-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		// Below the kernel's ephemeral range (32768 and up on Linux):
		// a port the kernel picked for us could be picked again, before
		// our server binds it, for any outgoing connection on the machine.
		port := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if portsGiven[port] != nil {
			continue
		}
		claim, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(claim.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = claim.Close() // another test process holds it
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			_ = claim.Close()
			continue
		}
		_ = l.Close()
		portsGiven[port] = claim
		return port
	}
	t.Fatal("no free TCP port found")
	return 0
}

// The range FreePort picks from, and the ports it gave this process, each
// with its claim, open for as long as the process runs.
const freePortLow, freePortHigh = 15000, 32000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]*os.File{}
)

// RunnerCredential runs a child as Debian's postgres user when the test runs
// as root (PostgreSQL refuses to run as root), and as the caller otherwise.
func RunnerCredential(t testing.TB) *syscall.SysProcAttr {
	if os.Getuid() != 0 {
		return nil
	}
	uid, gid := postgresUser(t)
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
}

// ChownToRunner hands path (recursively) to the user RunnerCredential runs as.
func ChownToRunner(t testing.TB, path string) {
	if os.Getuid() != 0 {
		return
	}
	uid, gid := postgresUser(t)
	_ = os.Chmod(filepath.Dir(path), 0o755)
	err := filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func postgresUser(t testing.TB) (uint32, uint32) {
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root needs the postgres user of Debian's postgresql package: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid)
}

// FlipByte writes src to dst with its middle byte flipped: a corrupted copy.
func FlipByte(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
