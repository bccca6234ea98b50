package testpg

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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
	certsDir             string
	port                 int
	cmd                  *exec.Cmd
	exited               chan error
	// output is the server's stdout and stderr, for a start that fails.
	output *SyncBuffer
	// env is added to the server's environment (StartMinIOWith).
	env []string
}

// SyncBuffer is a bytes.Buffer that a process's output goroutines write
// while a test may read it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// StartMinIO starts MinIO in a temp dir; it stops at cleanup.
func StartMinIO(t testing.TB) *MinIO { t.Helper(); return StartMinIOWith(t) }

// StartMinIOWith starts MinIO with env added to its environment (an
// OpenID provider, a KMS key).
func StartMinIOWith(t testing.TB, env ...string) *MinIO {
	t.Helper()
	m := newMinIO(t)
	m.env = env
	m.Start(t)
	t.Cleanup(m.Stop)
	return m
}

func newMinIO(t testing.TB) *MinIO {
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
	// Credentials of its own: a restart that finds its port taken by
	// another test's MinIO (another package runs beside this one) must
	// not take that server for itself.
	return &MinIO{Endpoint: fmt.Sprintf("127.0.0.1:%d", port), AccessKey: fmt.Sprintf("daytwo-test-%d", port), SecretKey: rand.Text(),
		dir: t.TempDir(), bin: bin, port: port}
}

// Start (re)starts the server on the same port and data.
func (m *MinIO) Start(t testing.TB) {
	t.Helper()
	args := []string{"server", filepath.Join(m.dir, "data"), "--address", m.Endpoint, "--console-address", "127.0.0.1:0", "--quiet"}
	if m.certsDir != "" {
		args = append(args, "--certs-dir", m.certsDir)
	}
	m.cmd = exec.Command(m.bin, args...)
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off", "HOME="+m.dir)
	m.cmd.Env = append(m.cmd.Env, m.env...)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	m.output = &SyncBuffer{}
	m.cmd.Stdout, m.cmd.Stderr = m.output, m.output
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.exited = make(chan error, 1)
	go func() { m.exited <- m.cmd.Wait() }()
	// The health endpoint answers before the object layer is up; wait
	// until a bucket call works.
	opts := &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")}
	if m.certsDir != "" {
		opts.Secure = true
		opts.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // a readiness probe of a test server
	}
	c, err := minio.New(m.Endpoint, opts)
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
		select {
		case exit := <-m.exited:
			m.exited <- exit // Stop waits on it too
			t.Fatalf("MinIO on %s exited while starting (%v): %s", m.Endpoint, exit, m.output)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("MinIO did not become ready: %v: %s", err, m.output)
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

// StartMinIOTLS is StartMinIO serving HTTPS with a self-signed certificate
// for 127.0.0.1; CAFile is that certificate.
func StartMinIOTLS(t testing.TB) (*MinIO, string) {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := writeSelfSigned(t, certs)
	m := newMinIO(t)
	m.certsDir = certs
	m.Start(t)
	t.Cleanup(m.Stop)
	return m, ca
}

// writeSelfSigned writes public.crt and private.key (MinIO's names) for
// 127.0.0.1 and returns the certificate's path.
func writeSelfSigned(t testing.TB, dir string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt := filepath.Join(dir, "public.crt")
	if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "private.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return crt
}
