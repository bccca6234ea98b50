package backup_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/backup"
)

// With an encryption key, nothing a logical backup stores shows its rows
// or its roles, and it restores with the key alone: without it, or with
// another, the restore fails and restores nothing.
func TestEncryptedBackupShowsNothingAndRestores(t *testing.T) {
	t.Parallel()
	src, st := appServer(t, "CREATE ROLE reporter LOGIN PASSWORD 'report-secret'")
	src.Exec(t, "app", "SET ROLE app; CREATE TABLE secrets AS SELECT 'plaintext-canary-' || g AS v FROM generate_series(1, 5000) g")
	o := appOptions(src, st)
	o.Compression = backup.Compression{Algorithm: "none"} // nothing hides the rows but the encryption
	o.Series.Key = []byte(strings.Repeat("k", 32))
	o.Series.EncryptionKey = []byte(strings.Repeat("e", 32))
	m, err := backup.Run(ctx, o, "20260101T000000Z", "test")
	if err != nil || !m.Encrypted {
		t.Fatalf("backup: encrypted %v, %v", m.Encrypted, err)
	}
	keys, err := st.List(ctx, o.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ".manifest.json") {
			continue
		}
		rc, err := st.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := io.ReadAll(rc)
		_ = rc.Close()
		for _, plain := range []string{"plaintext-canary-", "reporter", "PGDMP"} {
			if bytes.Contains(stored, []byte(plain)) {
				t.Errorf("%s shows %q", k, plain)
			}
		}
	}

	restore := func(key []byte) error {
		dst := freshApp(t)
		r := opts(dst, "app", st)
		r.Series = o.Series
		r.Series.EncryptionKey = key
		_, err := backup.Restore(ctx, r, m.ID, "app")
		if err == nil && dst.Query(t, "app", "SELECT count(*) FROM secrets") != "5000" {
			t.Fatal("the restore lost rows")
		}
		return err
	}
	if err := restore(nil); !errors.Is(err, backup.ErrEncrypted) {
		t.Fatalf("restore without the key: %v", err)
	}
	if err := restore([]byte(strings.Repeat("x", 32))); err == nil {
		t.Fatal("a restore with another key succeeded")
	}
	if err := restore(o.Series.EncryptionKey); err != nil {
		t.Fatalf("restore with the key: %v", err)
	}
}
