package instance_test

// These tests run the real `daytwo instance run` binary against Debian's
// PostgreSQL (testpg.BinDir: 17 in `make test`, 15 and 18 where versions
// differ) on loopback ports and temp dirs.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/backup"
	manager "github.com/daytwo-dev/daytwo/internal/instance"
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
	in.cmd.Stdout, in.cmd.Stderr = testWriter{in.t, pod}, testWriter{in.t, pod}
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

func TestPrimaryLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := newInstance(t)
	in.start("orders-0")
	took := in.waitReady(90 * time.Second)
	t.Logf("initdb to ready: %s", took.Round(time.Millisecond))

	s := in.status()
	if s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning || s.InRecovery ||
		!strings.HasPrefix(s.PostgresVersion, testpg.Major(t)+".") || s.LSN == "" || s.PendingRestart {
		t.Fatalf("unexpected status %+v", s)
	}

	// A SQL round trip over TCP with the generated credentials and scram.
	conn, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatalf("app login over TCP: %v", err)
	}
	var method string
	if err := conn.QueryRow(ctx, "SELECT CASE WHEN rolpassword IS NULL THEN 'none' ELSE 'set' END FROM pg_authid WHERE rolname='shop'").Scan(&method); err == nil {
		t.Fatalf("the app role can read pg_authid")
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE orders (id int primary key, item text); INSERT INTO orders VALUES (1, 'tea'), (2, 'cake')"); err != nil {
		t.Fatal(err)
	}
	var auth string
	if err := conn.QueryRow(ctx, "SELECT current_setting('password_encryption')").Scan(&auth); err != nil || auth != "scram-sha-256" {
		t.Fatalf("password_encryption = %q, %v", auth, err)
	}
	_ = conn.Close(ctx)
	if _, err := in.connect(ctx, "shop", "wrong", "orders"); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if _, err := in.connect(ctx, "postgres", "", "postgres"); err == nil {
		t.Fatal("the superuser logged in over TCP")
	}

	if got := in.show(ctx, "shared_buffers"); got != "128MB" {
		t.Fatalf("shared_buffers = %s, want the tuned 128MB", got)
	}

	// A reloadable change applies without a restart; a restart-only one is reported.
	in.setParameters(map[string]string{"work_mem": "12MB", "shared_buffers": "64MB"})
	eventually(t, 15*time.Second, func() bool { return in.show(ctx, "work_mem") == "12MB" }, "work_mem reloaded")
	eventually(t, 15*time.Second, func() bool {
		s := in.status()
		return s.PendingRestart && strings.Join(s.PendingRestartSettings, ",") == "shared_buffers"
	}, "shared_buffers pending restart")

	took = in.stop()
	t.Logf("SIGTERM to exit: %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("shutdown took %s, more than the 10s timeout", took)
	}
	out, err := exec.Command(filepath.Join(testpg.BinDir(t), "pg_controldata"), filepath.Join(in.root, "data")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Database cluster state:               shut down") {
		t.Fatalf("the cluster was not shut down cleanly: %v\n%s", err, out)
	}

	// A restart keeps the data and applies the pending setting.
	in.start("orders-0")
	in.waitReady(60 * time.Second)
	conn, err = in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after restart = %d, %v", n, err)
	}
	if got := in.show(ctx, "shared_buffers"); got != "64MB" {
		t.Fatalf("shared_buffers after restart = %s, want 64MB", got)
	}
	if s := in.status(); s.PendingRestart {
		t.Fatalf("still pending restart after a restart: %+v", s)
	}

	t.Run("replica clones and streams", func(t *testing.T) {
		rep := newInstance(t, "--role", "replica", "--primary-host", "127.0.0.1", "--primary-port", strconv.Itoa(in.pgPort))
		rep.start("orders-1")
		took := rep.waitReady(90 * time.Second)
		t.Logf("clone to ready: %s", took.Round(time.Millisecond))
		if s := rep.status(); s.Role != instanceapi.RoleReplica || !s.InRecovery || !s.Streaming {
			t.Fatalf("unexpected replica status %+v", s)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO orders VALUES (3, 'scone')"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, func() bool {
			rc, err := rep.connect(ctx, "shop", appPassword, "orders")
			if err != nil {
				return false
			}
			defer func() { _ = rc.Close(ctx) }()
			var n int
			return rc.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n) == nil && n == 3
		}, "the replica sees the new row")

		// Without its primary a replica serves ever older data: not ready.
		_ = conn.Close(ctx)
		in.stop()
		eventually(t, 15*time.Second, func() bool { return !rep.readyz() }, "the replica not ready without its primary")
		in.start("orders-0")
		in.waitReady(60 * time.Second)
		eventually(t, 30*time.Second, rep.readyz, "the replica ready again once it streams")
	})
}

func TestRefusesAnotherMajorVersion(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	data := filepath.Join(in.root, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	in.writeFile("data/PG_VERSION", "14\n")
	testpg.ChownToRunner(t, in.root)
	in.start("orders-0")
	want := "PostgreSQL 14 but this image runs PostgreSQL " + testpg.Major(t)
	eventually(t, 20*time.Second, func() bool {
		resp, err := in.client().Get(in.url(instanceapi.PathStatus))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		s := in.status()
		return s.Phase == instanceapi.PhaseFailed && strings.Contains(s.Message, want)
	}, "phase Failed naming both versions")
	resp, err := in.client().Get(in.url(instanceapi.PathReadyz))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d, want 503", resp.StatusCode)
	}
	in.stop()
}

// kill SIGKILLs the instance manager and everything it started, as a node
// loss or the OOM killer would: no cleanup runs. It returns once they are
// gone (reaped), as they would be with their container.
func (in *instance) kill() {
	in.t.Helper()
	pids := descendants(in.cmd.Process.Pid, "")
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = in.cmd.Process.Kill()
	<-in.exited
	eventually(in.t, 30*time.Second, func() bool {
		return !slices.ContainsFunc(pids, func(pid int) bool {
			_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
			return err == nil
		})
	}, "the killed processes gone")
}

// procs reads every process of the host.
func procs() map[int]proc {
	out := map[int]proc{}
	for pid, p := range manager.Processes() {
		out[pid] = proc{ppid: p.PPID, comm: p.Comm, state: p.State}
	}
	return out
}

// proc is what the tests need of a process.
type proc struct {
	ppid        int
	comm, state string
}

// descendants lists the processes below pid, named name when name is set.
func descendants(pid int, name string) []int {
	all := procs()
	var out []int
	for p := range all {
		for a := all[p].ppid; a > 1; a = all[a].ppid {
			if a == pid {
				if name == "" || all[p].comm == name {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// checksum is a digest of the items table and its row count.
func checksum(t *testing.T, in *instance) string {
	t.Helper()
	return in.query(context.Background(), "SELECT count(*) || ':' || md5(string_agg(id || '=' || v, ',' ORDER BY id)) FROM items")
}

// superuser runs sql as the superuser, over the local socket as the
// instance manager does, and returns its output.
func (in *instance) superuser(sql string) string {
	in.t.Helper()
	psql := exec.Command(filepath.Join(testpg.BinDir(in.t), "psql"), "-X", "-qtA", "-v", "ON_ERROR_STOP=1",
		"-h", filepath.Join(in.root, "run"), "-p", strconv.Itoa(in.pgPort), "-U", "postgres", "-d", "postgres", "-c", sql)
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
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		in.t.Fatalf("connect: %v", err)
	}
	defer func() { _ = c.Close(ctx) }()
	var v string
	if err := c.QueryRow(ctx, sql).Scan(&v); err != nil {
		in.t.Fatalf("%s: %v", sql, err)
	}
	return v
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
	t   *testing.T
	pod string
}

func (w testWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Logf("[%s] %s", w.pod, line)
	}
	return len(p), nil
}

// A Database bootstrapped from a backup: the instance restores it before it
// ever listens on TCP, and refuses a corrupt one without becoming ready.
func TestRestoreFromBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := newInstance(t)
	src.start("orders-0")
	src.waitReady(90 * time.Second)
	conn, err := src.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	// Large enough that a restore takes a moment, so it can be killed halfway.
	if _, err := conn.Exec(ctx, "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 300000) g; "+
		"ALTER TABLE items ADD PRIMARY KEY (id)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	want := checksum(t, src)

	minio := testpg.StartMinIO(t)
	st, err := backup.NewS3(backup.S3Config{Endpoint: minio.Endpoint, Bucket: "backups", Insecure: true,
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	o := backup.Options{Conn: backup.Conn{Host: "127.0.0.1", Port: src.pgPort, User: "shop", Password: appPassword, Database: "orders"},
		Storage: st, Prefix: "ns/orders/", BinDir: testpg.BinDir(t),
		Series: backup.Series{UID: "uid-nightly", Name: "ns/orders-nightly", Database: "orders"}}
	m, err := backup.Run(ctx, o, "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	restoreFlags := []string{"--from-backup", "--restore-s3-endpoint", minio.Endpoint, "--restore-s3-bucket", "backups",
		"--restore-s3-insecure", "--restore-prefix", "ns/orders", "--restore-series-uid", "uid-nightly",
		"--restore-database-name", "orders", "--termination-log", ""}
	creds := []string{"AWS_ACCESS_KEY_ID=" + minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + minio.SecretKey}

	// As the operator runs it: the restore init container (--bootstrap-only,
	// the storage and its keys) restores and exits; the postgres container,
	// without them, serves the restored data.
	t.Run("a good backup", func(t *testing.T) {
		dst := newInstance(t, append([]string{"--" + instanceapi.FlagBootstrapOnly}, restoreFlags...)...)
		dst.env = creds
		start := time.Now()
		for range 2 { // the second finds the data and exits at once
			dst.runToExit("copy-0", "--bootstrap-only")
		}
		dst.extraFlags, dst.env = []string{"--from-backup", "--termination-log", ""}, nil
		dst.start("copy-0")
		took := dst.waitReady(90 * time.Second)
		t.Logf("restored and ready in %s", time.Since(start).Round(time.Millisecond))
		if took > 30*time.Second {
			t.Errorf("the postgres container took %s to serve data already restored", took)
		}
		if got := dst.show(ctx, "shared_buffers"); got != "128MB" {
			t.Errorf("restored instance runs shared_buffers %s", got)
		}
		c, err := dst.connect(ctx, "shop", appPassword, "orders")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close(ctx) }()
		var owner string
		if err := c.QueryRow(ctx, "SELECT tableowner FROM pg_tables WHERE tablename = 'items'").Scan(&owner); err != nil || owner != "shop" {
			t.Fatalf("restored table owned by %q: %v", owner, err)
		}
		if got := checksum(t, dst); got != want {
			t.Fatalf("restored checksum %s, want %s", got, want)
		}
	})

	// The postgres container never restores: without data it says that
	// only a new pod (its restore init container) restores again.
	t.Run("no data and no storage", func(t *testing.T) {
		dst := newInstance(t, "--from-backup", "--termination-log", filepath.Join(t.TempDir(), "termination"))
		dst.start("copy-0")
		eventually(t, 30*time.Second, func() bool {
			s, ok := dst.tryStatus()
			return ok && s.Phase == instanceapi.PhaseFailed && strings.Contains(s.Message, "only the restore init container")
		}, "phase Failed saying only the restore init container restores")
	})

	// A restore killed halfway (OOM, eviction, node loss: no cleanup runs)
	// must not leave a data directory the next start serves.
	t.Run("killed mid-restore restores again", func(t *testing.T) {
		dst := newInstance(t, restoreFlags...)
		dst.env = creds
		dst.start("copy-0")
		deadline := time.Now().Add(60 * time.Second)
		for len(descendants(dst.cmd.Process.Pid, "pg_restore")) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("pg_restore never ran")
			}
			time.Sleep(5 * time.Millisecond)
		}
		dst.kill()
		if _, err := os.Stat(filepath.Join(dst.root, "data", "PG_VERSION")); err == nil {
			t.Log("the killed restore left a data directory with PG_VERSION")
		}
		dst.start("copy-0")
		dst.waitReady(120 * time.Second)
		if got := checksum(t, dst); got != want {
			t.Fatalf("after a killed restore the instance serves checksum %s, want %s", got, want)
		}
	})

	// A retained volume never stands in for the restore a spec asks for.
	t.Run("retained data is not served in place of a restore", func(t *testing.T) {
		old := newInstance(t, "--database-uid", "uid-old")
		old.start("orders-0")
		old.waitReady(90 * time.Second)
		c, err := old.connect(ctx, "shop", appPassword, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (42)"); err != nil {
			t.Fatal(err)
		}
		_ = c.Close(ctx)
		old.stop()

		// The same volume under a new Database that asks for a restore.
		termLog := filepath.Join(old.root, "termination-log")
		old.extraFlags = append(slices.Clone(restoreFlags), "--database-uid", "uid-new", "--bootstrap-source", "fromBackup/orders-nightly",
			"--termination-log", termLog)
		old.env = creds
		old.start("orders-0")
		if old.exit(60*time.Second, "on another Database's data instead of restoring") == nil {
			t.Fatal("the instance manager exited cleanly on another Database's data")
		}
		msg, _ := os.ReadFile(termLog)
		if !strings.HasPrefix(string(msg), instanceapi.TerminationDataConflict) || !strings.Contains(string(msg), "daytwo.dev/reuse-data") {
			t.Fatalf("termination message %q does not explain the conflict", msg)
		}

		// Re-using it is an explicit choice, and the data is intact.
		old.extraFlags = append(old.extraFlags, "--reuse-data")
		old.start("orders-0")
		old.waitReady(60 * time.Second)
		if got := old.query(ctx, "SELECT count(*)::text FROM kept"); got != "1" {
			t.Fatalf("kept rows = %s, want 1", got)
		}
		old.stop()

		// deletionPolicy Retain's promise: initdb on initdb data continues on it.
		old.extraFlags = []string{"--database-uid", "uid-third"}
		old.start("orders-0")
		old.waitReady(60 * time.Second)
		if got := old.query(ctx, "SELECT count(*)::text FROM kept"); got != "1" {
			t.Fatalf("kept rows = %s, want 1", got)
		}
	})

	t.Run("a corrupt backup", func(t *testing.T) {
		rc, err := st.Get(ctx, m.DataKey)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		_ = rc.Close()
		data[len(data)/3] ^= 0xff
		if err := st.Put(ctx, m.DataKey, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		dst := newInstance(t, restoreFlags...)
		dst.env = creds
		dst.start("copy-0")
		select {
		case err := <-dst.exited:
			if err == nil {
				t.Fatal("the instance manager exited cleanly after a corrupt restore")
			}
		case <-time.After(90 * time.Second):
			t.Fatal("the instance manager kept running after a corrupt restore")
		}
		if entries, _ := os.ReadDir(filepath.Join(dst.root, "data")); len(entries) != 0 {
			t.Fatalf("the refused restore left %d entries in the data directory", len(entries))
		}
	})
}
