package instance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// A hot standby refuses to start below the values its primary last logged
// for the standby-sensitive settings (postgres.StandbySensitive), which the
// replica's control file records as it replays them. When a setting is
// lowered, the operator restarts the primary first; a replica restarted
// before it replayed the primary's parameter-change record (it was cut off,
// or lagging) would crash at every start. So a replica starts with its
// primary's logged value where that is higher than its own, and restarts
// once it has replayed the change, to run what it is configured with.

// floor is a standby-sensitive setting a replica runs above its own
// configuration: the primary's logged value, and the configured one.
type floor struct{ primary, configured int }

// controlLabels maps pg_controldata's names for the primary's logged
// settings to the settings.
var controlLabels = map[string]string{
	"max_connections setting":      "max_connections",
	"max_worker_processes setting": "max_worker_processes",
	"max_wal_senders setting":      "max_wal_senders",
	"max_prepared_xacts setting":   "max_prepared_transactions",
	"max_locks_per_xact setting":   "max_locks_per_transaction",
}

// parseControlData reads pg_controldata's output (in the C locale): each
// label and its value.
func parseControlData(out []byte) map[string]string {
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if label, value, ok := strings.Cut(sc.Text(), ":"); ok {
			got[strings.TrimSpace(label)] = strings.TrimSpace(value)
		}
	}
	return got
}

// parseControlSettings reads the primary's logged standby-sensitive settings
// from pg_controldata's output (in the C locale).
func parseControlSettings(out []byte) map[string]int {
	got := map[string]int{}
	for label, value := range parseControlData(out) {
		name, known := controlLabels[label]
		if !known {
			continue
		}
		if n, err := strconv.Atoi(value); err == nil {
			got[name] = n
		}
	}
	return got
}

// controlData runs pg_controldata on the data directory dir.
func (m *Manager) controlData(ctx context.Context, dir string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.cfg.bin("pg_controldata"), "-D", dir)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pg_controldata failed: %w", err)
	}
	return out, nil
}

// controlSettings reads the primary's logged standby-sensitive settings
// from the data directory's control file.
func (m *Manager) controlSettings(ctx context.Context) (map[string]int, error) {
	out, err := m.controlData(ctx, m.cfg.PGData)
	if err != nil {
		return nil, err
	}
	got := parseControlSettings(out)
	if len(got) != len(controlLabels) {
		return nil, fmt.Errorf("pg_controldata named %d of the %d standby-sensitive settings", len(got), len(controlLabels))
	}
	return got, nil
}

// configuredSetting asks postgres for the value of name that the
// configuration files in the data directory give.
func (m *Manager) configuredSetting(ctx context.Context, name string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, m.cfg.bin("postgres"), "-D", m.cfg.PGData, "-C", name).Output()
	if err != nil {
		return 0, fmt.Errorf("postgres -C %s failed: %w", name, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// primaryFloors finds the standby-sensitive settings this replica is
// configured below its primary's logged values.
func (m *Manager) primaryFloors(ctx context.Context) (map[string]floor, error) {
	logged, err := m.controlSettings(ctx)
	if err != nil {
		return nil, err
	}
	floors := map[string]floor{}
	for _, name := range postgres.StandbySensitive {
		configured, err := m.configuredSetting(ctx, name)
		if err != nil {
			return nil, err
		}
		if logged[name] > configured {
			floors[name] = floor{primary: logged[name], configured: configured}
		}
	}
	return floors, nil
}

// writeStartConfig writes the managed configuration before postgres
// starts. On a replica it is written again with the primary's logged values
// where they are above its own (postgres -C reads the first). A failure to
// read them is only logged: postgres then says what it lacks.
func (m *Manager) writeStartConfig(ctx context.Context) error {
	m.conf.mu.Lock()
	m.conf.floors = nil
	m.conf.mu.Unlock()
	if err := m.writeConfig(m.cfg.PGData); err != nil {
		return err
	}
	if names, err := m.cfg.startingSyncNames(); err == nil {
		// What renewals record until manageSync looks: the setting the
		// server starts with, not none (which failover reads as
		// asynchronous), after a restart of this manager.
		m.shared.mu.Lock()
		m.shared.syncRecord = names
		m.shared.mu.Unlock()
	}
	var floors map[string]floor
	if m.role() == instanceapi.RoleReplica {
		var err error
		if floors, err = m.primaryFloors(ctx); err != nil {
			m.log.Error(err, "Could not compare this replica's settings with its primary's")
		}
	}
	m.conf.mu.Lock()
	m.conf.floors = floors
	m.conf.mu.Unlock()
	m.shared.mu.Lock()
	m.shared.status.RaisedSettings = slices.Sorted(maps.Keys(floors))
	m.shared.mu.Unlock()
	if len(floors) == 0 {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(floors)) {
		f := floors[name]
		m.log.Info("Starting with the primary's higher setting until this replica replays its change",
			"setting", name, "primary", f.primary, "configured", f.configured)
	}
	return m.writeConfig(m.cfg.PGData)
}

// floorsReplayed, on a replica started above its configuration, says
// whether it has replayed the primary's change since: its control file
// then no longer asks for more than it is configured with.
func (m *Manager) floorsReplayed(ctx context.Context) bool {
	m.conf.mu.Lock()
	floors := m.conf.floors
	m.conf.mu.Unlock()
	if len(floors) == 0 || m.role() != instanceapi.RoleReplica {
		return false
	}
	logged, err := m.controlSettings(ctx)
	if err != nil {
		return false
	}
	for name, f := range floors {
		if logged[name] > f.configured {
			return false
		}
	}
	return true
}

// floorSettings renders floors as configuration lines.
func floorSettings(floors map[string]floor) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(floors)) {
		fmt.Fprintf(&b, "%s = %d\n", name, floors[name].primary)
	}
	return b.String()
}

// dropFloors, on a replica just promoted while it ran its old primary's
// higher values, writes its configuration without them and reloads. A
// primary's floors never replay away, so until its next start postgres
// reports them pending a restart and raisedSettings still names them: the
// operator then restarts it in place, first, as for any lowered setting
// (lowerOnPrimaryFirst).
func (m *Manager) dropFloors() {
	m.conf.mu.Lock()
	defer m.conf.mu.Unlock()
	if len(m.conf.floors) == 0 {
		return
	}
	m.conf.floors = nil
	conf := filepath.Join(m.cfg.PGData, "postgresql.conf")
	if err := writeFileAtomic(conf, m.cfg.managedConf(instanceapi.RolePrimary, m.holderName(), nil)); err != nil {
		m.log.Error(err, "Failed to drop the old primary's raised settings from the configuration")
		return
	}
	m.log.Info("Promoted while running the old primary's higher settings; they apply until postgres restarts",
		"settings", m.Status().RaisedSettings)
	m.Reload()
}
