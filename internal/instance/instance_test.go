package instance_test

// These tests run the real `daytwo instance run` binary against Debian's
// PostgreSQL (testpg.BinDir: 17 in `make test`, 15 and 18 where versions
// differ) on loopback ports and temp dirs.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testenv"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// daytwoBin is the daytwo binary the tests run as instance managers.
//
// Tests that start their own servers run side by side (t.Parallel): they
// mostly wait on PostgreSQL. Those that assert the lease's deadlines on
// the wall clock (a fence before the lease expires, a switchover or a
// failover within its bounds) run alone, first, as Go runs serial tests:
// under the others' load a deadline measures the machine, not the rule.
var daytwoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "daytwo-instance-test-")
	if err != nil {
		panic(err)
	}
	daytwoBin = filepath.Join(dir, "daytwo")
	build := exec.Command("go", "build", "-o", daytwoBin, "./cmd/daytwo")
	build.Dir = testenv.RepoRoot()
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		panic(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// instance is one `daytwo instance run` process with its directories.
type instance struct {
	t           *testing.T
	root        string
	pgPort      int
	httpPort    int
	metricsPort int
	cmd         *exec.Cmd
	exited      chan error
	extraFlags  []string
	env         []string
	// pidNamespace starts the instance manager as PID 1 of a new PID
	// namespace, as the container runtime does.
	pidNamespace bool
	// api calls the instance API; with --tls, over HTTPS with a client
	// certificate (testCA.issue sets it).
	api *http.Client
	// logs, when set before start, keeps a copy of everything the
	// instance manager and postgres log.
	logs *testpg.SyncBuffer
}

// client is the instance API client: plain HTTP unless set.
func (in *instance) client() *http.Client {
	if in.api != nil {
		return in.api
	}
	return http.DefaultClient
}

const appPassword = "app-pass-Ø:'\"-1"

func newInstance(t *testing.T, extra ...string) *instance {
	root := t.TempDir()
	in := &instance{t: t, root: root, pgPort: testpg.FreePort(t), httpPort: testpg.FreePort(t), metricsPort: testpg.FreePort(t), extraFlags: extra}
	for _, d := range []string{"secrets", "config"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in.writeFile("secrets/app-password", appPassword)
	in.writeFile("secrets/replication-password", "repl-secret")
	in.setParameters(map[string]string{})
	testpg.ChownToRunner(t, root)
	return in
}

func (in *instance) writeFile(rel, content string) {
	in.t.Helper()
	if err := os.WriteFile(filepath.Join(in.root, rel), []byte(content), 0o644); err != nil {
		in.t.Fatal(err)
	}
}

// setParameters renders the settings the operator would for a 512Mi pod,
// with user overrides.
func (in *instance) setParameters(user map[string]string) {
	params := postgres.Merge(postgres.Tune(postgres.Resources{MemoryBytes: 512 << 20, CPUMillis: 1000}), user)
	in.writeFile("config/postgresql.conf", postgres.Render(params))
}

func (in *instance) start(pod string) {
	in.t.Helper()
	args := []string{"instance", "run", "--pgdata", filepath.Join(in.root, "data"),
		"--parameters-file", filepath.Join(in.root, "config/postgresql.conf"),
		"--secrets-dir", filepath.Join(in.root, "secrets"), "--run-dir", filepath.Join(in.root, "run"),
		"--http-address", fmt.Sprintf("127.0.0.1:%d", in.httpPort), "--port", strconv.Itoa(in.pgPort),
		"--metrics-address", fmt.Sprintf("127.0.0.1:%d", in.metricsPort),
		"--cluster", "orders", "--pod", pod, "--database", "orders", "--owner", "shop",
		"--bin-dir", testpg.BinDir(in.t), "--shutdown-timeout", "10s", "--role", "primary"}
	in.cmd = exec.Command(daytwoBin, append(args, in.extraFlags...)...)
	in.cmd.Stdout, in.cmd.Stderr = testWriter{in.t, pod, in.logs}, testWriter{in.t, pod, in.logs}
	in.cmd.SysProcAttr = testpg.RunnerCredential(in.t)
	if in.pidNamespace {
		if in.cmd.SysProcAttr == nil {
			in.cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		in.cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	in.cmd.Env = append(os.Environ(), in.env...)
	if err := in.cmd.Start(); err != nil {
		in.t.Fatal(err)
	}
	in.exited = make(chan error, 1)
	go func() { in.exited <- in.cmd.Wait() }()
	in.t.Cleanup(func() {
		if in.cmd.ProcessState == nil {
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
			<-in.exited
		}
	})
}

func (in *instance) waitReady(timeout time.Duration) time.Duration {
	in.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		resp, err := in.client().Get(in.url(instanceapi.PathReadyz))
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		select {
		case err := <-in.exited:
			in.t.Fatalf("instance exited before it was ready: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	in.t.Fatalf("instance not ready within %s: %+v", timeout, in.status())
	return 0
}

func (in *instance) readyz() bool {
	resp, err := in.client().Get(in.url(instanceapi.PathReadyz))
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (in *instance) url(path string) string {
	if in.api != nil {
		return fmt.Sprintf("https://127.0.0.1:%d%s", in.httpPort, path)
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", in.httpPort, path)
}

func (in *instance) status() instanceapi.Status {
	in.t.Helper()
	s, err := in.getStatus()
	if err != nil {
		in.t.Fatalf("GET /status: %v", err)
	}
	return s
}

// tryStatus is the status, if the manager answers.
func (in *instance) tryStatus() (instanceapi.Status, bool) {
	s, err := in.getStatus()
	return s, err == nil
}

// freshStatus is the status with WAL positions read for the answer.
func (in *instance) freshStatus() instanceapi.Status {
	in.t.Helper()
	s, err := in.getStatusAt(instanceapi.PathStatus + "?" + instanceapi.QueryFresh + "=true")
	if err != nil {
		in.t.Fatalf("GET /status?fresh: %v", err)
	}
	return s
}

// lsnAtLeast: lsn parses and is at least want.
func lsnAtLeast(lsn string, want uint64) bool {
	got, ok := postgres.ParseLSN(lsn)
	return ok && got >= want
}

func (in *instance) getStatus() (instanceapi.Status, error) {
	return in.getStatusAt(instanceapi.PathStatus)
}

func (in *instance) getStatusAt(path string) (instanceapi.Status, error) {
	var s instanceapi.Status
	resp, err := in.client().Get(in.url(path))
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// runToExit starts in as pod in a one-shot mode (--upgrade-only,
// --bootstrap-only) and waits for it to exit successfully.
func (in *instance) runToExit(pod, mode string) {
	in.t.Helper()
	in.start(pod)
	if err := in.exit(120*time.Second, "with "+mode); err != nil {
		in.t.Fatalf("%s: %v", mode, err)
	}
}

// exit waits up to timeout for the instance manager to exit, and returns
// its error; it fails the test if it still runs (what says when).
func (in *instance) exit(timeout time.Duration, what string) error {
	in.t.Helper()
	select {
	case err := <-in.exited:
		return err
	case <-time.After(timeout):
		in.t.Fatalf("the instance manager still runs %s", what)
		return nil
	}
}

// stop sends SIGTERM and returns how long the shutdown took.
func (in *instance) stop() time.Duration {
	in.t.Helper()
	start := time.Now()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		in.t.Fatal(err)
	}
	select {
	case err := <-in.exited:
		if err != nil {
			in.t.Fatalf("instance manager exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		in.t.Fatal("instance manager did not exit within 30s of SIGTERM")
	}
	return time.Since(start)
}

// connect connects over TCP, with TLS when the server offers it (an
// instance with --tls requires it).
func (in *instance) connect(ctx context.Context, userName, password, db string) (*pgx.Conn, error) {
	return in.connectSSL(ctx, "prefer", userName, password, db)
}

func (in *instance) connectSSL(ctx context.Context, sslmode, userName, password, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s sslmode=%s", in.pgPort, db, userName, sslmode))
	if err != nil {
		return nil, err
	}
	cfg.Password = password
	return pgx.ConnectConfig(ctx, cfg)
}

func (in *instance) show(ctx context.Context, setting string) string {
	in.t.Helper()
	conn, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		in.t.Fatalf("connect: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var v string
	if err := conn.QueryRow(ctx, "SHOW "+setting).Scan(&v); err != nil {
		in.t.Fatal(err)
	}
	return v
}

// superuser runs sql as the superuser, over the local socket as the
// instance manager does, and returns its output.
func (in *instance) superuser(sql string) string {
	in.t.Helper()
	return in.superuserIn("postgres", sql)
}

// superuserIn is superuser in database db.
func (in *instance) superuserIn(db, sql string) string {
	in.t.Helper()
	psql := exec.Command(filepath.Join(testpg.BinDir(in.t), "psql"), "-X", "-qtA", "-v", "ON_ERROR_STOP=1",
		"-h", filepath.Join(in.root, "run"), "-p", strconv.Itoa(in.pgPort), "-U", "postgres", "-d", db, "-c", sql)
	psql.SysProcAttr = testpg.RunnerCredential(in.t)
	out, err := psql.CombinedOutput()
	if err != nil {
		in.t.Fatalf("psql: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// query runs sql as the application owner and returns the single text value.
func (in *instance) query(ctx context.Context, sql string) string {
	in.t.Helper()
	v, err := in.tryQuery(ctx, sql)
	if err != nil {
		in.t.Fatal(err)
	}
	return v
}

// tryQuery is query returning its error, for a condition polled until it
// holds.
func (in *instance) tryQuery(ctx context.Context, sql string) (string, error) {
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = c.Close(ctx) }()
	var v string
	if err := c.QueryRow(ctx, sql).Scan(&v); err != nil {
		return "", fmt.Errorf("%s: %w", sql, err)
	}
	return v, nil
}

func eventually(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type testWriter struct {
	t    *testing.T
	pod  string
	logs *testpg.SyncBuffer
}

func (w testWriter) Write(p []byte) (int, error) {
	if w.logs != nil {
		_, _ = w.logs.Write(p)
	}
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Logf("[%s] %s", w.pod, line)
	}
	return len(p), nil
}
