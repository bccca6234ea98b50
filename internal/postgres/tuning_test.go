package postgres

import (
	"slices"
	"strings"
	"testing"
)

func TestTune(t *testing.T) {
	tests := []struct {
		name string
		in   Resources
		want map[string]string
	}{
		{"1Gi small tier", Resources{MemoryBytes: giB, CPUMillis: 1000, StorageBytes: 10 * giB}, map[string]string{
			"shared_buffers": "256MB", "effective_cache_size": "768MB", "max_connections": "100",
			"work_mem": "4MB", "maintenance_work_mem": "64MB", "wal_buffers": "8MB",
			"max_wal_size": "2GB", "min_wal_size": "512MB", "max_worker_processes": "8",
			"max_parallel_workers": "1", "max_parallel_workers_per_gather": "1",
		}},
		{"4Gi medium tier", Resources{MemoryBytes: 4 * giB, CPUMillis: 2000, StorageBytes: 50 * giB}, map[string]string{
			"shared_buffers": "1GB", "effective_cache_size": "3GB", "max_connections": "200",
			"work_mem": "5242kB", "maintenance_work_mem": "256MB", "wal_buffers": "16MB",
			"max_wal_size": "8GB", "max_parallel_workers": "2", "max_parallel_workers_per_gather": "1",
		}},
		{"16Gi large tier", Resources{MemoryBytes: 16 * giB, CPUMillis: 4000, StorageBytes: 200 * giB}, map[string]string{
			"shared_buffers": "4GB", "effective_cache_size": "12GB", "max_connections": "500",
			"maintenance_work_mem": "1GB", "max_wal_size": "16GB", "max_parallel_workers_per_gather": "2",
		}},
		{"small volume caps WAL", Resources{MemoryBytes: 2 * giB, StorageBytes: 1 * giB}, map[string]string{
			"max_wal_size": "256MB", "min_wal_size": "64MB",
		}},
		{"no memory known assumes 1Gi", Resources{}, map[string]string{
			"shared_buffers": "256MB", "max_worker_processes": "8",
		}},
		{"odd memory rounds to kB", Resources{MemoryBytes: 1000 * miB}, map[string]string{
			"shared_buffers": "250MB", "effective_cache_size": "750MB",
		}},
		{"huge memory caps everything", Resources{MemoryBytes: 256 * giB, CPUMillis: 64000}, map[string]string{
			"max_connections": "500", "maintenance_work_mem": "2GB", "wal_buffers": "16MB",
			"max_wal_size": "16GB", "max_worker_processes": "64",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Tune(tt.in)
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestMergeUserWins(t *testing.T) {
	params := Merge(map[string]string{"shared_buffers": "256MB", "work_mem": "4MB"},
		map[string]string{"work_mem": "64MB", "jit": "off"})
	got := map[string]Effective{}
	for i, p := range params {
		if i > 0 && params[i-1].Name >= p.Name {
			t.Fatalf("not sorted: %s before %s", params[i-1].Name, p.Name)
		}
		got[p.Name] = p
	}
	for name, want := range map[string]Effective{
		"work_mem":            {"work_mem", "64MB", "User"},
		"jit":                 {"jit", "off", "User"},
		"shared_buffers":      {"shared_buffers", "256MB", "Tuned"},
		"password_encryption": {"password_encryption", "scram-sha-256", "Default"},
	} {
		if got[name] != want {
			t.Errorf("%s = %+v, want %+v", name, got[name], want)
		}
	}
	conf := Render(params)
	if !strings.Contains(conf, "work_mem = '64MB'\t# user\n") {
		t.Errorf("rendered config lacks the user's work_mem:\n%s", conf)
	}
}

func TestRenderQuotes(t *testing.T) {
	got := Render([]Effective{{"search_path", "a, 'b'", "User"}})
	if !strings.Contains(got, `search_path = 'a, ''b'''`) {
		t.Errorf("quote not doubled: %s", got)
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{
		64 * kiB: "64kB", 5 * miB: "5MB", 5*miB + 512: "5120kB", giB: "1GB", 3*giB + 512*miB: "3584MB", 16 * giB: "16GB",
	} {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %s, want %s", in, got, want)
		}
	}
}

func TestRestartOnlyAndChanged(t *testing.T) {
	params := Merge(Tune(Resources{MemoryBytes: giB}), map[string]string{"work_mem": "8MB"})
	ro := RestartOnly(params)
	if ro["shared_buffers"] != "256MB" || ro["max_connections"] != "100" {
		t.Errorf("restart-only settings missing: %v", ro)
	}
	if _, ok := ro["work_mem"]; ok {
		t.Errorf("work_mem reloads without a restart")
	}
	got := ChangedKeys(map[string]string{"a": "1", "b": "2", "c": "3"}, map[string]string{"a": "1", "b": "3", "d": "4"})
	if strings.Join(got, ",") != "b,c,d" {
		t.Errorf("ChangedKeys = %v", got)
	}
}

func TestImageMajor(t *testing.T) {
	for in, want := range map[string]string{
		"postgres:16":                       "16",
		"docker.io/library/postgres:15.4":   "15",
		"ghcr.io/x/postgres:17.1-bookworm":  "17",
		"registry:5000/postgres":            "",
		"postgres:latest":                   "",
		"postgres:15@sha256:abc":            "15",
		"localhost/postgres:15-daytwo-next": "15",
	} {
		if got := ImageMajor(in); got != want {
			t.Errorf("ImageMajor(%q) = %q, want %q", in, got, want)
		}
	}
	if got := MajorOf("15.14 (Debian 15.14-0+deb12u1)"); got != "15" {
		t.Errorf("MajorOf = %q", got)
	}
}

func TestLowered(t *testing.T) {
	running := map[string]string{"max_connections": "100", "max_locks_per_transaction": "64", "max_wal_senders": "10"}
	want := []Effective{
		{Name: "max_connections", Value: "90"},           // lowered
		{Name: "max_locks_per_transaction", Value: "65"}, // raised
		{Name: "max_wal_senders", Value: "10"},           // unchanged
		{Name: "max_worker_processes", Value: "4"},       // not running: unknown
		{Name: "shared_buffers", Value: "1MB"},           // not sensitive
	}
	if got := Lowered(running, want); !slices.Equal(got, []string{"max_connections"}) {
		t.Errorf("Lowered = %v, want [max_connections]", got)
	}
}
