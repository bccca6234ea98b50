package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// syncFile, in the data directory, holds synchronous_standby_names. The
// managed postgresql.conf includes it last, so it wins over the
// operator's parameters; only the instance manager writes it.
const syncFile = "daytwo-sync.conf"

// replicationFile is the operator's instanceapi.ReplicationFile, next to
// its parameters.
func (c *Config) replicationFile() string {
	return filepath.Join(filepath.Dir(c.ParametersFile), instanceapi.ReplicationFile)
}

// replication reads what the operator asks for; a missing file (an
// instance run without the operator) is asynchronous replication.
func (c *Config) replication() (instanceapi.Replication, error) {
	var r instanceapi.Replication
	b, err := os.ReadFile(c.replicationFile())
	if os.IsNotExist(err) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("failed to read %s: %w", instanceapi.ReplicationFile, err)
	}
	return r, nil
}

// syncConf is the content of syncFile.
func syncConf(names string) string {
	return fmt.Sprintf("# Written by the daytwo instance manager; edits are lost.\nsynchronous_standby_names = '%s'\n", names)
}

// startingSyncNames is the setting an instance starts with, before it
// knows which standbys stream: what required durability asks for, or none.
func (c *Config) startingSyncNames() (string, error) {
	r, err := c.replication()
	if err != nil {
		return "", err
	}
	return instanceapi.SynchronousStandbyNames(r, c.Pod, nil), nil
}

// slotPrefix marks the physical replication slots the instance manager
// keeps; it leaves every other slot alone.
const slotPrefix = "daytwo_"

// slotGrace is how long a primary keeps a daytwo slot that no instance in
// its list wants, unused, before it drops it.
const slotGrace = 5 * time.Minute

// slotName is the physical replication slot of the instance pod on the
// primary: slot names allow only lower-case letters, digits and underscores.
func slotName(pod string) string {
	return slotPrefix + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, pod)
}

// slotChanges is the bookkeeping of the primary self's slots: one per other
// instance, so a replica that falls behind or restarts finds every WAL
// segment it needs; none for an instance that is gone. existing are the
// daytwo slots there now. An empty instance list (an instance run without
// the operator) changes nothing.
func slotChanges(instances []string, self string, existing []string) (create, drop []string) {
	if len(instances) == 0 {
		return nil, nil
	}
	want := map[string]bool{}
	for _, name := range instances {
		if name != self {
			want[slotName(name)] = true
		}
	}
	for _, s := range existing {
		if !want[s] {
			drop = append(drop, s)
		}
		delete(want, s)
	}
	for s := range want {
		create = append(create, s)
	}
	slices.Sort(create)
	slices.Sort(drop)
	return create, drop
}

// manageSlots keeps the daytwo slots in line with slotChanges on a primary
// and on the replica the lease names, and drops them on other replicas,
// where a slot would only hold back their own WAL (an old primary keeps
// its slots across a switchover). A slot still in use is dropped later.
func (m *Manager) manageSlots(ctx context.Context, conn *pgx.Conn, r instanceapi.Replication, st *monitorState) {
	existing, active, err := daytwoSlots(ctx, conn)
	if err != nil {
		return
	}
	var create, drop []string
	switch {
	case m.role() == instanceapi.RolePrimary || m.holderName() == m.cfg.Pod:
		// A replica the lease names is about to be promoted: its peers
		// stream from it already (followHolder), and their slots must be
		// there when they reconnect after the promotion.
		create, drop = slotChanges(r.Instances, m.cfg.Pod, existing)
	case len(r.Instances) > 0:
		drop = existing
	}
	drop = slices.DeleteFunc(drop, func(s string) bool { return slices.Contains(active, s) })
	// A slot no instance wants goes only after slotGrace: the operator's
	// instance list reaches each pod with a delay (a ConfigMap volume), so a
	// new replica's slot may be unknown here for a while.
	now := time.Now()
	seen := st.unwantedSlots
	st.unwantedSlots = map[string]time.Time{}
	drop = slices.DeleteFunc(drop, func(s string) bool {
		since, ok := seen[s]
		if !ok {
			since = now
		}
		st.unwantedSlots[s] = since
		return m.role() == instanceapi.RolePrimary && now.Sub(since) < slotGrace
	})
	m.createSlots(ctx, conn, create)
	for _, s := range drop {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", s); err != nil {
			m.log.Error(err, "Failed to drop a replication slot", "slot", s)
			continue
		}
		m.log.Info("Dropped a replication slot", "slot", s)
	}
}

// forgetStandbys empties Status.Standbys when pg_stat_replication cannot
// be read: not known is not streaming, and the operator's restart gate
// (inPlaceHealthy) must not trust an old list.
func (m *Manager) forgetStandbys() {
	m.shared.mu.Lock()
	m.shared.status.Standbys = nil
	m.shared.mu.Unlock()
}

// manageSync, on the primary, keeps synchronous_standby_names in line with
// the operator's wish and the standbys that stream, and reloads when it
// changes. A standby that stops streaming leaves the setting within a
// second under preferred durability, and never under required.
func (m *Manager) manageSync(ctx context.Context, conn *pgx.Conn, r instanceapi.Replication) {
	var streaming []string
	rows, err := conn.Query(ctx, "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'")
	if err == nil {
		streaming, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		m.forgetStandbys()
		return
	}
	m.shared.mu.Lock()
	if m.shared.status.Phase == instanceapi.PhaseRunning {
		m.shared.status.Standbys = slices.Sorted(slices.Values(streaming))
	}
	m.shared.mu.Unlock()
	want := instanceapi.SynchronousStandbyNames(r, m.cfg.Pod, streaming)
	var have string
	if err := conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&have); err != nil {
		return
	}
	if !m.recordSync(have, want) {
		return
	}
	if err := os.WriteFile(filepath.Join(m.cfg.PGData, syncFile), []byte(syncConf(want)), 0o600); err != nil {
		m.log.Error(err, "Failed to write the synchronous standby names")
		return
	}
	m.log.Info("Synchronous standbys changed", "from", have, "to", want, "streaming", streaming)
	m.reloadConfig(ctx, conn)
}

// recordSync sets what the lease renewals record, and says whether the
// setting may change from have to want now: only once the lease records
// both values, so failover never trusts more than the acknowledged commits
// have.
func (m *Manager) recordSync(have, want string) bool {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	if have == want {
		m.shared.syncRecord = have
		return false
	}
	m.shared.syncRecord = have + instanceapi.SyncSeparator + want
	return m.lease == nil || m.shared.syncRecorded == m.shared.syncRecord
}

// daytwoSlots lists the daytwo slots here, and those of them in use.
func daytwoSlots(ctx context.Context, conn *pgx.Conn) (existing, active []string, err error) {
	rows, err := conn.Query(ctx, "SELECT slot_name, active FROM pg_replication_slots WHERE slot_type = 'physical' AND slot_name LIKE 'daytwo\\_%'")
	if err != nil {
		return nil, nil, err
	}
	var name string
	var inUse bool
	_, err = pgx.ForEachRow(rows, []any{&name, &inUse}, func() error {
		existing = append(existing, name)
		if inUse {
			active = append(active, name)
		}
		return nil
	})
	return existing, active, err
}

// createSlots makes the physical slots names, reserving WAL at once.
func (m *Manager) createSlots(ctx context.Context, conn *pgx.Conn, names []string) {
	for _, s := range names {
		if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", s); err != nil {
			m.log.Error(err, "Failed to create a replication slot", "slot", s)
			continue
		}
		m.log.Info("Created a replication slot", "slot", s)
	}
}

// createPeerSlots makes the slots of the other instances that are missing
// here: a replica does it just before its promotion.
func (m *Manager) createPeerSlots(ctx context.Context, conn *pgx.Conn) {
	r, err := m.cfg.replication()
	if err != nil {
		return
	}
	existing, _, err := daytwoSlots(ctx, conn)
	if err != nil {
		return
	}
	create, _ := slotChanges(r.Instances, m.cfg.Pod, existing)
	m.createSlots(ctx, conn, create)
}
