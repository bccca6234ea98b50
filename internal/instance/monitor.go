package instance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// monitor waits for postgres to accept connections, finishes bootstrapping,
// then keeps the status fresh and reloads a changed parameters file.
func (m *Manager) monitor(ctx context.Context, fence chan<- error, st *monitorState) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	hash := m.parametersHash()
	duties := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if conn == nil || conn.IsClosed() {
			conn = m.connect(ctx)
		}
		if conn == nil {
			m.forgetStandbys()
		}
		if conn != nil {
			if newHash := m.parametersHash(); newHash != hash {
				hash = newHash
				m.Reload()
			}
			m.refreshTLS()
			m.observe(ctx, conn, hash, st)
			if conn != nil && !conn.IsClosed() {
				m.manageReplication(ctx, conn, st)
			} else {
				m.forgetStandbys() // a hung server's list is not to be trusted
			}
			if !duties {
				duties = m.startPrimaryDuties(ctx, fence)
			}
			if err := m.cannotFollow(ctx, &st.follow); err != nil {
				m.stopToRepair(err, fence)
			}
			if m.floorsReplayed(ctx) {
				m.log.Info("Replayed the primary's lowered settings; restarting to run this replica's own")
				select {
				case m.restartReq <- struct{}{}:
				case <-ctx.Done():
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-m.reload:
			if conn != nil {
				m.reloadConfig(ctx, conn)
			}
		case <-m.named:
			if conn != nil && !conn.IsClosed() {
				m.manageReplication(ctx, conn, st)
			}
		case <-tick.C:
		}
	}
}

// connect opens the local superuser connection and, on a primary, ensures
// the roles. It returns nil while postgres is not ready yet.
func (m *Manager) connect(ctx context.Context) *pgx.Conn {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, m.localDSN())
	if err != nil {
		return nil
	}
	// The manager's own writes (roles) must not wait for a synchronous
	// standby that may not be there.
	if _, err := conn.Exec(cctx, "SET synchronous_commit = local"); err != nil {
		_ = conn.Close(ctx)
		return nil
	}
	if m.role() == instanceapi.RolePrimary {
		if err := m.ensureRoles(ctx, conn); err != nil {
			m.setMessage(err.Error())
			m.log.Error(err, "Failed to ensure roles")
			_ = conn.Close(ctx)
			return nil
		}
		m.afterUpgradeOnce.Do(func() { go m.afterUpgrade(ctx) })
	}
	return conn
}

// manageReplication keeps replication slots and, on the primary,
// synchronous_standby_names in line with the operator's wish.
func (m *Manager) manageReplication(ctx context.Context, conn *pgx.Conn, st *monitorState) {
	r, err := m.cfg.replication()
	if err != nil {
		m.log.Error(err, "Failed to read the replication settings")
		m.forgetStandbys() // not refreshed: not to be trusted
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m.manageSlots(ctx, conn, r, st)
	if m.role() == instanceapi.RolePrimary {
		m.manageSync(ctx, conn, r)
	}
}

func (m *Manager) localDSN() string {
	return m.localDSNFor("postgres")
}

// localDSNFor is localDSN in database db.
func (m *Manager) localDSNFor(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname='%s' connect_timeout=3", m.cfg.RunDir, m.cfg.Port,
		strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(db))
}

func (m *Manager) reloadConfig(ctx context.Context, conn *pgx.Conn) {
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		m.log.Error(err, "Failed to reload the configuration")
		return
	}
	m.log.Info("Reloaded the configuration")
	// The postmaster applies a reload asynchronously; give it a moment
	// before pending_restart is read.
	time.Sleep(200 * time.Millisecond)
}

// walPositions selects Status.LSN (replayed on a replica, written on a
// primary) and Status.ReceivedLSN, "" for none.
const walPositions = `COALESCE(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text, ''),
		COALESCE(pg_last_wal_receive_lsn()::text, '')`

// observe refreshes the status from the running server.
func (m *Manager) observe(ctx context.Context, conn *pgx.Conn, hash string, st *monitorState) {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var version, lsn, received string
	var inRecovery bool
	var timeline, receiver int
	var replayedAt *time.Time
	err := conn.QueryRow(qctx, `SELECT current_setting('server_version'), pg_is_in_recovery(), `+walPositions+`,
		pg_last_xact_replay_timestamp(),
		COALESCE((SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'), 0),
		CASE WHEN pg_is_in_recovery() THEN COALESCE(GREATEST((SELECT received_tli FROM pg_stat_wal_receiver),
			(SELECT timeline_id FROM pg_control_checkpoint()), (SELECT min_recovery_end_timeline FROM pg_control_recovery())), 0)
			ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).
		Scan(&version, &inRecovery, &lsn, &received, &replayedAt, &receiver, &timeline)
	if err != nil {
		_ = conn.Close(ctx)
		return
	}
	// A walreceiver says "streaming" from the moment it starts, even one the
	// primary refuses at once (WAL gone): retried every
	// wal_retrieve_retry_interval, such a replica would look streaming in
	// many samples. Only a receiver that outlived two observations counts.
	streaming := receiver != 0 && receiver == st.receiverPID
	st.receiverPID = receiver
	if inRecovery {
		// received_tli vanishes with the walreceiver, as when the primary
		// just died, and the control file's timelines can lag the one being
		// replayed for minutes; failover ranks replicas by timeline first,
		// so report the newest one seen (see followWatch).
		timeline = max(timeline, st.follow.timeline)
	}
	rows, err := conn.Query(qctx, "SELECT name FROM pg_settings WHERE pending_restart ORDER BY name")
	if err != nil {
		_ = conn.Close(ctx)
		return
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	settings := map[string]string{}
	rows, err = conn.Query(qctx, "SELECT name, setting FROM pg_settings WHERE name = ANY($1)", postgres.StandbySensitive)
	if err != nil {
		_ = conn.Close(ctx)
		return
	}
	var name, value string
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error { settings[name] = value; return nil }); err != nil {
		return
	}
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	s := &m.shared.status
	s.PostgresVersion, s.InRecovery, s.LSN, s.ConfigHash, s.Streaming = version, inRecovery, lsn, hash, streaming
	m.noteStreaming(streaming)
	s.ReceivedLSN, s.Timeline = received, timeline
	m.shared.replayedAt = replayedAt
	s.PendingRestartSettings, s.PendingRestart = pending, len(pending) > 0
	s.StandbySettings = settings
	if s.Phase == instanceapi.PhaseStarting {
		s.Phase, s.Message = instanceapi.PhaseRunning, ""
		m.log.Info("Instance is running", "role", s.Role, "version", version)
	}
}

func (m *Manager) parametersHash() string {
	b, err := os.ReadFile(m.cfg.ParametersFile)
	if err != nil {
		return ""
	}
	return instanceapi.ParametersHash(b)
}
