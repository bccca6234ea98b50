package postgres

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// TestRenderRoundTripsThroughPostgres has PostgreSQL 15's own parser
// (postgres -C) read what Render writes: every value must come back exactly,
// and no value may add or change another setting.
func TestRenderRoundTripsThroughPostgres(t *testing.T) {
	bin := filepath.Join(testpg.BinDir(t), "postgres")
	tests := []struct {
		name, value string // value of log_line_prefix, which takes any string
		omitted     bool   // Render must leave the setting out
	}{
		{"plain", "%m [%p] %q%u@%d ", false},
		{"quotes", `'o''brien' "x"`, false},
		{"trailing backslash", `app\`, false},
		{"backslash before a quote", `a\' #`, false},
		{"escape sequences stay literal", `\n\t\101\\`, false},
		// The backslash uses up one of the doubled quotes so the next one
		// closes the string; the newline then starts lines of the writer's
		// choosing.
		{"newline injects settings", "a\\'\narchive_mode = on\narchive_command = evil #", true},
		{"lone newline", "a\nb", true},
		{"carriage return", "a\rb", true},
		{"NUL", "a\x00b", true},
		{"DEL", "a\x7fb", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			conf := Render([]Effective{
				{Name: "log_line_prefix", Value: tt.value, Source: "User"},
				{Name: "application_name", Value: "daytwo", Source: "Default"},
			})
			if err := os.WriteFile(filepath.Join(dir, "postgresql.conf"), []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			testpg.ChownToRunner(t, dir)
			want := map[string]string{
				"log_line_prefix":  tt.value,
				"application_name": "daytwo",
				"archive_mode":     "off",
				"archive_command":  "",
			}
			if tt.omitted {
				want["log_line_prefix"] = "%m [%p] " // PostgreSQL's default
				if !strings.Contains(conf, `# omitted "log_line_prefix"`) {
					t.Errorf("no comment says log_line_prefix was omitted:\n%s", conf)
				}
			}
			for name, v := range want {
				if got := showSetting(t, bin, dir, name); got != v {
					t.Errorf("%s = %q, want %q; rendered:\n%s", name, got, v, conf)
				}
			}
		})
	}
}

func TestRenderOmitsMalformedNames(t *testing.T) {
	conf := Render([]Effective{
		{Name: "x = 'y'\narchive_command", Value: "evil", Source: "User"},
		{Name: "Work_Mem", Value: "1GB", Source: "User"},
		{Name: "work_mem", Value: "64MB", Source: "User"},
	})
	lines := strings.Split(strings.TrimSuffix(conf, "\n"), "\n")
	want := []string{
		`# omitted "x = 'y'\narchive_command": its name or value cannot be written here`,
		`# omitted "Work_Mem": its name or value cannot be written here`,
		"work_mem = '64MB'\t# user",
	}
	if !slices.Equal(lines[1:], want) {
		t.Errorf("rendered:\n%s\nwant the lines:\n%s", conf, strings.Join(want, "\n"))
	}
}

// showSetting is the value the server would run with, as its config file
// parser reads the data directory dir.
func showSetting(t *testing.T, bin, dir, name string) string {
	t.Helper()
	cmd := exec.Command(bin, "-C", name, "-D", dir)
	cmd.SysProcAttr = testpg.RunnerCredential(t)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("postgres -C %s: %v\n%s", name, err, stderr.String())
	}
	return strings.TrimSuffix(string(out), "\n")
}
