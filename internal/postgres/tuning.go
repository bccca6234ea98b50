package postgres

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	kiB = int64(1) << 10
	miB = int64(1) << 20
	giB = int64(1) << 30
)

// DefaultMemory is what tuning assumes when a pod has neither a memory
// limit nor a request.
const DefaultMemory = 1 * giB

// Resources is what tuning reads from an instance's pod.
type Resources struct {
	// MemoryBytes is the memory limit (or the request when there is no limit).
	MemoryBytes int64
	// CPUMillis is the CPU limit (or the request); 0 means unknown.
	CPUMillis int64
	// StorageBytes is the data volume's size; 0 means unknown.
	StorageBytes int64
}

// Tune derives the memory, connection, WAL and parallelism settings from an
// instance's resources. The formula (documented in docs/database.md) follows the
// Spilo and PGTune rules of thumb:
//
//	shared_buffers        = memory / 4
//	effective_cache_size  = memory * 3 / 4
//	max_connections       = 50 per GiB of memory, between 100 and 500
//	work_mem              = (memory - shared_buffers) / (3 * max_connections), at least 4MB
//	maintenance_work_mem  = memory / 16, between 64MB and 2GB
//	wal_buffers           = shared_buffers / 32, between 64kB and 16MB
//	max_wal_size          = memory * 2, between 1GB and 16GB, and at most a quarter of the volume
//	min_wal_size          = max_wal_size / 4
//	max_worker_processes  = max(8, CPUs)
//	max_parallel_workers  = CPUs (at least 1)
//	max_parallel_workers_per_gather     = CPUs / 2 (at least 1)
//	max_parallel_maintenance_workers    = CPUs / 2 (at least 1)
//
// Values are rounded down to whole kB (or MB from 1GB up) so PostgreSQL
// reports them back unchanged.
func Tune(r Resources) map[string]string {
	mem := r.MemoryBytes
	if mem <= 0 {
		mem = DefaultMemory
	}
	cpus := max(r.CPUMillis/1000, 1)

	shared := mem / 4
	conns := clamp(50*mem/giB, 100, 500)
	work := max((mem-shared)/(3*conns), 4*miB)
	walSize := clamp(2*mem, 1*giB, 16*giB)
	if r.StorageBytes > 0 {
		walSize = max(min(walSize, r.StorageBytes/4), 64*miB)
	}
	// WAL kept past checkpoints, so an old primary can pg_rewind and a
	// replica that fell behind can catch up instead of being cloned again.
	keep := 512 * miB
	if r.StorageBytes > 0 {
		keep = clamp(r.StorageBytes/20, 64*miB, 512*miB)
	}
	out := map[string]string{
		"wal_keep_size":                    FormatBytes(keep),
		"shared_buffers":                   FormatBytes(shared),
		"effective_cache_size":             FormatBytes(mem * 3 / 4),
		"max_connections":                  strconv.FormatInt(conns, 10),
		"work_mem":                         FormatBytes(work),
		"maintenance_work_mem":             FormatBytes(clamp(mem/16, 64*miB, 2*giB)),
		"wal_buffers":                      FormatBytes(clamp(shared/32, 64*kiB, 16*miB)),
		"max_wal_size":                     FormatBytes(walSize),
		"min_wal_size":                     FormatBytes(max(walSize/4, 32*miB)),
		"max_worker_processes":             strconv.FormatInt(max(8, cpus), 10),
		"max_parallel_workers":             strconv.FormatInt(cpus, 10),
		"max_parallel_workers_per_gather":  strconv.FormatInt(max(cpus/2, 1), 10),
		"max_parallel_maintenance_workers": strconv.FormatInt(max(cpus/2, 1), 10),
	}
	if r.StorageBytes > 0 {
		// A replica's slot keeps WAL for it while it is away, but never
		// more than a quarter of the volume: past that the slot is given
		// up, and the replica rewinds or is cloned again, rather than the
		// primary's disk filling up.
		out["max_slot_wal_keep_size"] = FormatBytes(max(r.StorageBytes/4, 64*miB))
	}
	return out
}

// Defaults are settings daytwo always sets: what a production instance and
// the later replication issue need. Users may override them.
func Defaults() map[string]string {
	return map[string]string{
		"password_encryption":   "scram-sha-256",
		"wal_level":             "replica",
		"max_wal_senders":       "10",
		"max_replication_slots": "10",
		"hot_standby":           "on",
		// A replica retries its primary every 200 ms, not 5 s: synchronous
		// commits on a new primary wait for it, and its first attempt can
		// come a moment before the new primary made its slot.
		"wal_retrieve_retry_interval": "200ms",
		"wal_log_hints":               "on",
		"log_line_prefix":             "%m [%p] %q%u@%d ",
		"log_checkpoints":             "on",
		"log_lock_waits":              "on",
		"log_min_duration_statement":  "1000",
		"shared_preload_libraries":    "pg_stat_statements",
		"dynamic_shared_memory_type":  "posix",
	}
}

// Effective is one setting with where its value came from.
type Effective struct {
	Name, Value string
	// Source is "Tuned", "User" or "Default" (the API's ParameterSource values).
	Source string
}

// Merge layers defaults, tuned values and user values (user wins) and returns
// them sorted by name.
func Merge(tuned, user map[string]string) []Effective {
	all := map[string]Effective{}
	for k, v := range Defaults() {
		all[k] = Effective{k, v, "Default"}
	}
	for k, v := range tuned {
		all[k] = Effective{k, v, "Tuned"}
	}
	for k, v := range user {
		all[k] = Effective{k, v, "User"}
	}
	out := make([]Effective, 0, len(all))
	for _, k := range slices.Sorted(maps.Keys(all)) {
		out = append(out, all[k])
	}
	return out
}

// Render writes settings as postgresql.conf lines. Values are single-quoted
// and escaped the way PostgreSQL's config file parser reads them back: a
// backslash starts an escape there and a doubled quote is a quote.
//
// A newline cannot be quoted at all: it ends the line and the string with
// it, so a value could add settings of its own. Admission refuses control
// characters in values and malformed names, but an object stored before
// those rules (the API server lets unchanged values through) can still hold
// one. Render leaves such a setting out, with a comment naming it, instead
// of failing: one bad value must not keep every other setting from reaching
// the instances, and cutting characters out would run a value nobody asked
// for. PostgreSQL keeps its default for the omitted setting.
func Render(params []Effective) string {
	var b strings.Builder
	b.WriteString("# Rendered by daytwo from the Database's resources and spec.parameters.\n")
	for _, p := range params {
		if !settingName.MatchString(p.Name) || strings.ContainsFunc(p.Value, isControl) {
			fmt.Fprintf(&b, "# omitted %s: its name or value cannot be written here\n", strconv.QuoteToASCII(p.Name))
			continue
		}
		fmt.Fprintf(&b, "%s = '%s'\t# %s\n", p.Name, quoteEscaper.Replace(p.Value), strings.ToLower(p.Source))
	}
	return b.String()
}

// settingName is what admission accepts as a parameter name.
var settingName = regexp.MustCompile(`^[a-z][a-z0-9_.]*$`)

// quoteEscaper escapes a value for a single-quoted postgresql.conf string.
var quoteEscaper = strings.NewReplacer(`\`, `\\`, `'`, `''`)

// isControl says whether r is a character admission refuses in values:
// ASCII control characters and DEL.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// FormatBytes writes n in the largest of kB, MB or GB that divides it after
// rounding down to whole kB (MB from 1GB up), as postgresql.conf expects.
func FormatBytes(n int64) string {
	switch {
	case n >= giB && n%giB == 0:
		return fmt.Sprintf("%dGB", n/giB)
	case n >= giB:
		return fmt.Sprintf("%dMB", n/miB)
	case n%miB == 0:
		return fmt.Sprintf("%dMB", n/miB)
	default:
		return fmt.Sprintf("%dkB", n/kiB)
	}
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }
