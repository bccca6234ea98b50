package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
// operator from before synchronous replication) is asynchronous replication.
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

// synchronousStandbyNames is the setting for the primary self given the
// standbys that stream now. With required durability it names every other
// instance, whether it streams or not, so a commit waits for as many
// replicas as asked. Otherwise it asks for no more of them than stream.
func synchronousStandbyNames(r instanceapi.Replication, self string, streaming []string) string {
	var others []string
	for _, name := range r.Instances {
		if name != self {
			others = append(others, name)
		}
	}
	n := min(r.Synchronous, len(others))
	if !r.Required {
		up := 0
		for _, name := range others {
			if slices.Contains(streaming, name) {
				up++
			}
		}
		n = min(n, up)
	}
	if n <= 0 {
		return ""
	}
	quoted := make([]string, len(others))
	for i, name := range others {
		quoted[i] = `"` + name + `"` // pod names: lower-case letters, digits and dashes
	}
	return fmt.Sprintf("ANY %d (%s)", n, strings.Join(quoted, ", "))
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
	return synchronousStandbyNames(r, c.Pod, nil), nil
}

// manageSync, on the primary, keeps synchronous_standby_names in line with
// the operator's wish and the standbys that stream, and reloads when it
// changes. A standby that stops streaming leaves the setting within a
// second under preferred durability, and never under required.
func (m *Manager) manageSync(ctx context.Context, conn *pgx.Conn) {
	r, err := m.cfg.replication()
	if err != nil {
		m.log.Error(err, "Failed to read the replication settings")
		return
	}
	rows, err := conn.Query(ctx, "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'")
	if err != nil {
		return
	}
	streaming, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	want := synchronousStandbyNames(r, m.cfg.Pod, streaming)
	var have string
	if err := conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&have); err != nil || have == want {
		return
	}
	if err := os.WriteFile(filepath.Join(m.cfg.PGData, syncFile), []byte(syncConf(want)), 0o600); err != nil {
		m.log.Error(err, "Failed to write the synchronous standby names")
		return
	}
	m.log.Info("Synchronous standbys changed", "from", have, "to", want, "streaming", streaming)
	m.reloadConfig(ctx, conn)
}
