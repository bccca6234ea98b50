package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"testing"
)

// The binary trusts the public CAs an object store's certificate chains to
// even where the system has no CA certificates (the PostgreSQL images have
// none): a public root (ISRG Root X1, Let's Encrypt's) verifies against the
// system pool of a process that sees no system certificates. The check runs
// in a child process, since a process loads the system pool once.
func TestPublicRootsWithoutSystemCertificates(t *testing.T) {
	if os.Getenv("DAYTWO_ROOTS_CHILD") == "1" {
		b, err := os.ReadFile("testdata/isrg-root-x1.pem")
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			t.Fatalf("no system pool: %v", err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
			t.Fatalf("a public root does not verify: %v", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPublicRootsWithoutSystemCertificates$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DAYTWO_ROOTS_CHILD=1", "SSL_CERT_FILE=/nonexistent", "SSL_CERT_DIR=/nonexistent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("without system certificates: %v\n%s", err, out)
	}
}
