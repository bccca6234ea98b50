package instance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// The monitor compares the parameters file it reads with what postgres
// loaded by hash: the hash follows the content, and a missing file has
// none. It connects over the socket in the run directory, never TCP.
func TestMonitorReadsParametersAndConnectsLocally(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{PGData: filepath.Join(dir, "pgdata"), ParametersFile: filepath.Join(dir, "params.conf"), RunDir: "/run/daytwo", Port: 5432}
	m := New(cfg, logr.Discard(), nil)
	if h := m.parametersHash(); h != "" {
		t.Fatalf("hash of a missing file: %q", h)
	}
	write := func(s string) string {
		if err := os.WriteFile(cfg.ParametersFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return m.parametersHash()
	}
	a, b, a2 := write("work_mem = '4MB'\n"), write("work_mem = '8MB'\n"), write("work_mem = '4MB'\n")
	if a == "" || a == b || a != a2 {
		t.Errorf("hashes %q, %q, %q: want one per content", a, b, a2)
	}
	if dsn := m.localDSN(); !strings.Contains(dsn, "host=/run/daytwo ") || !strings.Contains(dsn, "port=5432") {
		t.Errorf("localDSN = %q, want the socket in the run directory", dsn)
	}
}
