package testpg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIO is a MinIO server on loopback, built by hack/build-addons.sh.
type MinIO struct {
	Endpoint             string
	AccessKey, SecretKey string
	dir, bin             string
	port                 int
	cmd                  *exec.Cmd
	exited               chan error
}

// StartMinIO starts MinIO in a temp dir; it stops at cleanup.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin := os.Getenv("DAYTWO_MINIO")
	if bin == "" {
		cache := os.Getenv("DAYTWO_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "daytwo")
		}
		bin = filepath.Join(cache, "addons", "minio")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MinIO not found at %s (run `make deps` or set DAYTWO_MINIO): %v", bin, err)
	}
	port := FreePort(t)
	m := &MinIO{Endpoint: fmt.Sprintf("127.0.0.1:%d", port), AccessKey: "daytwo-test", SecretKey: "daytwo-test-secret",
		dir: t.TempDir(), bin: bin, port: port}
	m.Start(t)
	t.Cleanup(m.Stop)
	return m
}

// Start (re)starts the server on the same port and data.
func (m *MinIO) Start(t testing.TB) {
	t.Helper()
	m.cmd = exec.Command(m.bin, "server", filepath.Join(m.dir, "data"), "--address", m.Endpoint, "--console-address", "127.0.0.1:0", "--quiet")
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off", "HOME="+m.dir)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.exited = make(chan error, 1)
	go func() { m.exited <- m.cmd.Wait() }()
	// The health endpoint answers before the object layer is up; wait
	// until a bucket call works.
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.BucketExists(ctx, "probe")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MinIO did not become ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop kills the server at once, as a crash would.
func (m *MinIO) Stop() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
}
