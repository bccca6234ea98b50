package backup_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// An S3 endpoint whose certificate chains to a private CA (one no image
// knows) is reached over verified TLS with S3Config.CAFile, and refused
// without it: the certificate is verified, not skipped.
func TestS3WithAPrivateCA(t *testing.T) {
	t.Parallel()
	minio, ca := testpg.StartMinIOTLS(t)
	cfg := backup.S3Config{Endpoint: minio.Endpoint, Bucket: "private-ca", AccessKeyID: minio.AccessKey,
		SecretAccessKey: minio.SecretKey, PartSize: 5 << 20}
	without, err := backup.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, without); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
	cfg.CAFile = ca
	st, err := backup.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if err := st.Put(ctx, "k", bytes.NewReader([]byte("verified"))); err != nil {
		t.Fatal(err)
	}
	r, err := st.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if b, _ := io.ReadAll(r); string(b) != "verified" {
		t.Fatalf("read back %q", b)
	}
	cfg.CAFile = minio.Endpoint // not a PEM file
	if _, err := backup.NewS3(cfg); err == nil {
		t.Error("a CA file that cannot be read was accepted")
	}
}
