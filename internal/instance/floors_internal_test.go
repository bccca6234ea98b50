package instance

import (
	"maps"
	"testing"
)

// pg_controldata's output as PostgreSQL 15 prints it in the C locale,
// trimmed to the lines around the logged settings.
const controlData = `pg_control version number:            1300
Database cluster state:               in archive recovery
wal_level setting:                    replica
wal_log_hints setting:                on
max_connections setting:              200
max_worker_processes setting:         8
max_wal_senders setting:              10
max_prepared_xacts setting:           0
max_locks_per_xact setting:           128
track_commit_timestamp setting:       off
Maximum data alignment:               8
`

func TestParseControlSettings(t *testing.T) {
	t.Parallel()
	want := map[string]int{"max_connections": 200, "max_worker_processes": 8, "max_wal_senders": 10,
		"max_prepared_transactions": 0, "max_locks_per_transaction": 128}
	if got := parseControlSettings([]byte(controlData)); !maps.Equal(got, want) {
		t.Fatalf("parseControlSettings = %v, want %v", got, want)
	}
	if got := parseControlSettings([]byte("max_connections setting: many\n")); len(got) != 0 {
		t.Fatalf("an unreadable value parsed as %v", got)
	}
}

func TestFloorSettings(t *testing.T) {
	t.Parallel()
	got := floorSettings(map[string]floor{"max_locks_per_transaction": {128, 64}, "max_connections": {200, 100}})
	if want := "max_connections = 200\nmax_locks_per_transaction = 128\n"; got != want {
		t.Fatalf("floorSettings = %q, want %q", got, want)
	}
}
