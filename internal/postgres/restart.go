package postgres

import (
	"slices"
	"strconv"
)

// restartSettings are the settings of context "postmaster" (pg_settings) that
// daytwo or users commonly set: changing one only takes effect after a
// restart. The instance manager also asks PostgreSQL itself
// (pg_settings.pending_restart); this list lets the operator plan the
// rolling restart without a connection.
var restartSettings = map[string]bool{
	"archive_mode":                    true,
	"autovacuum_max_workers":          true,
	"hot_standby":                     true,
	"huge_pages":                      true,
	"max_connections":                 true,
	"max_files_per_process":           true,
	"max_locks_per_transaction":       true,
	"max_logical_replication_workers": true,
	"max_pred_locks_per_transaction":  true,
	"max_prepared_transactions":       true,
	"max_replication_slots":           true,
	"max_wal_senders":                 true,
	"max_worker_processes":            true,
	"shared_buffers":                  true,
	"shared_preload_libraries":        true,
	"superuser_reserved_connections":  true,
	"track_commit_timestamp":          true,
	"wal_buffers":                     true,
	"wal_level":                       true,
	"wal_log_hints":                   true,
	"dynamic_shared_memory_type":      true,
	"logging_collector":               true,
}

// NeedsRestart says whether changing the named setting takes a restart.
func NeedsRestart(name string) bool { return restartSettings[name] }

// RestartOnly returns the settings among params that need a restart.
func RestartOnly(params []Effective) map[string]string {
	out := map[string]string{}
	for _, p := range params {
		if NeedsRestart(p.Name) {
			out[p.Name] = p.Value
		}
	}
	return out
}

// ChangedKeys returns the sorted names whose values differ between a and b,
// including names present in only one of them.
func ChangedKeys(a, b map[string]string) []string {
	var out []string
	for k := range a {
		if bv, ok := b[k]; !ok || bv != a[k] {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// StandbySensitive are the settings a hot standby may not run lower than
// its primary: PostgreSQL refuses to start recovery below the primary's
// value. Raising one restarts replicas first; lowering one restarts the
// primary first.
var StandbySensitive = []string{"max_connections", "max_locks_per_transaction", "max_prepared_transactions",
	"max_wal_senders", "max_worker_processes"}

// Lowered names the standby-sensitive settings whose value in want is
// below the running one.
func Lowered(running map[string]string, want []Effective) []string {
	var names []string
	for _, e := range want {
		if !slices.Contains(StandbySensitive, e.Name) {
			continue
		}
		have, err1 := strconv.Atoi(running[e.Name])
		next, err2 := strconv.Atoi(e.Value)
		if err1 == nil && err2 == nil && next < have {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return names
}
