package instance

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// The instance manager serves /metrics for its own PostgreSQL on
// Config.MetricsAddress, over plain HTTP: the figures carry no secret,
// and a scraper needs no certificate. Every scrape queries PostgreSQL on
// a connection of its own, under metricsTimeout, so a slow or broken query
// costs the scrape its figures and never holds up /readyz or the status.

// metricsTimeout bounds one scrape's queries together: well within a
// scraper's timeout (config/monitoring sets 10 s), so a hung server costs
// the figures, with daytwo_postgres_up 0, and never the scrape.
const metricsTimeout = 3 * time.Second

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("daytwo_"+name, help, labels, nil)
}

var (
	descUp   = desc("postgres_up", "1 when PostgreSQL answered this scrape's queries in time, else 0.")
	descInfo = desc("postgres_info", "1, labelled with the server version and the instance's role.",
		"server_version", "role")
	descPrimary        = desc("instance_primary", "1 when this instance runs as the primary.")
	descPendingRestart = desc("postgres_pending_restart", "1 when a changed setting waits for a restart.")
	descStreaming      = desc("postgres_wal_receiver_streaming", "On a replica, 1 while its WAL receiver streams from the primary.")
	descVolumeSize     = desc("volume_size_bytes", "Size of the filesystem that holds the data directory.", "volume")
	descVolumeFree     = desc("volume_available_bytes", "Bytes still available to PostgreSQL on the filesystem of the data directory.", "volume")

	descBackends     = desc("postgres_backends", "Client connections by database and state.", "datname", "state")
	descMaxConns     = desc("postgres_max_connections", "The max_connections setting.")
	descOldestXact   = desc("postgres_oldest_transaction_seconds", "Age of the longest-running open transaction (0 when none).")
	descLocksWaiting = desc("postgres_locks_waiting", "Lock requests not granted yet.")

	descCommits   = desc("postgres_xact_commit_total", "Transactions committed.", "datname")
	descRollbacks = desc("postgres_xact_rollback_total", "Transactions rolled back.", "datname")
	descDeadlocks = desc("postgres_deadlocks_total", "Deadlocks detected.", "datname")
	descTempBytes = desc("postgres_temp_bytes_total", "Bytes written to temporary files by queries.", "datname")
	descDBSize    = desc("postgres_database_size_bytes", "Disk space used by the database.", "datname")

	descLagBytes   = desc("postgres_replication_lag_bytes", "On the primary, WAL a replica has not replayed yet.", "replica")
	descLagSeconds = desc("postgres_replication_lag_seconds", "On the primary, a replica's replay lag as PostgreSQL measures it (0 when idle).", "replica")
	descSyncState  = desc("postgres_replication_synchronous", "On the primary, 1 when a replica counts for synchronous commit (sync or quorum).", "replica")
	descReplay     = desc("postgres_replay_lag_seconds", "On a replica, time since the last replayed transaction while WAL waits to be replayed (0 when caught up).")
	descSlotBytes  = desc("postgres_replication_slot_retained_bytes", "WAL a replication slot holds back.", "slot")
	descSlotActive = desc("postgres_replication_slot_active", "1 while a replication slot is in use.", "slot")

	descCkptTimed    = desc("postgres_checkpoints_timed_total", "Checkpoints started by checkpoint_timeout.")
	descCkptReq      = desc("postgres_checkpoints_requested_total", "Checkpoints requested (WAL volume, a backup, CHECKPOINT).")
	descCkptWrite    = desc("postgres_checkpoint_write_seconds_total", "Time checkpoints spent writing buffers.")
	descCkptSync     = desc("postgres_checkpoint_sync_seconds_total", "Time checkpoints spent syncing files.")
	descCkptBuffers  = desc("postgres_checkpoint_buffers_written_total", "Buffers written by checkpoints.")
	descBgwClean     = desc("postgres_bgwriter_buffers_clean_total", "Buffers written by the background writer.")
	descBgwMaxWrite  = desc("postgres_bgwriter_maxwritten_clean_total", "Times the background writer stopped a round for writing too many buffers.")
	descBuffersAlloc = desc("postgres_buffers_allocated_total", "Buffers allocated.")

	descArchived      = desc("wal_archived_total", "WAL files this instance archived since it started.")
	descArchiveFailed = desc("wal_archive_failed_total", "Failed attempts to archive a WAL file since this instance started.")
	descLastArchived  = desc("wal_last_archived_timestamp_seconds", "When this instance last archived a WAL file.")
	descPending       = desc("wal_archive_pending_files", "Finished WAL files not archived yet.")
	descPendingBytes  = desc("wal_archive_pending_bytes", "Bytes of finished WAL not archived yet.")
	descTimeToFull    = desc("wal_volume_time_to_full_seconds", "While archiving fails, the estimated time until WAL fills the volume; +Inf while it keeps up.")
)

// pgCollector is the collector of one instance's PostgreSQL figures.
type pgCollector struct {
	m *Manager
	// turn serialises scrapes on conn, the scrapes' own connection: a
	// scrape waits for its turn within its own deadline.
	turn chan struct{}
	conn *pgx.Conn
	// queryErrors counts the queries that failed, by query.
	queryErrors *prometheus.CounterVec
}

// Describe sends nothing: which figures exist depends on the role and the
// server version, so this is an unchecked collector.
func (c *pgCollector) Describe(chan<- *prometheus.Desc) {}

func (c *pgCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		sample(ch, d, prometheus.GaugeValue, v, labels...)
	}
	running := s.Phase == instanceapi.PhaseRunning
	gauge(descPrimary, boolFloat(s.Role == instanceapi.RolePrimary && !s.InRecovery && running))
	gauge(descPendingRestart, boolFloat(s.PendingRestart))
	if s.Role == instanceapi.RoleReplica && running {
		gauge(descStreaming, boolFloat(s.Streaming))
	}
	// The data directory's parent: the volume's root, there before the data.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(filepath.Clean(c.m.cfg.PGData)), &fs); err == nil {
		gauge(descVolumeSize, float64(fs.Blocks)*float64(fs.Bsize), "data")
		gauge(descVolumeFree, float64(fs.Bavail)*float64(fs.Bsize), "data")
	}
	if a := s.Archive; a != nil {
		sample(ch, descArchived, prometheus.CounterValue, float64(a.Archived))
		sample(ch, descArchiveFailed, prometheus.CounterValue, float64(a.Failed))
		if a.LastArchivedTime != nil {
			gauge(descLastArchived, float64(a.LastArchivedTime.Unix()))
		}
		gauge(descPending, float64(a.Pending))
		gauge(descPendingBytes, float64(a.PendingBytes))
		// +Inf while archiving keeps up: the series exists, and no
		// threshold fires on it.
		ttf := math.Inf(1)
		if a.TimeToFullSeconds > 0 {
			ttf = float64(a.TimeToFullSeconds)
		}
		gauge(descTimeToFull, ttf)
	}

	// PostgreSQL is asked only while the instance runs it: a clone, a
	// restore or a restart is no instance down (the phase says what it is).
	if !running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	select {
	case c.turn <- struct{}{}:
		defer func() { <-c.turn }()
	case <-ctx.Done():
		// Another scrape holds the connection past this one's deadline:
		// no figures, and no verdict on the server either.
		c.queryErrors.WithLabelValues("turn").Inc()
		return
	}
	gauge(descUp, boolFloat(c.queryAll(ctx, ch, s)))
}

// version asks the server its version on the scrapes' connection, opening
// it again once when the one it had broke (a restart of PostgreSQL).
func (c *pgCollector) version(ctx context.Context) (string, int, error) {
	var version string
	var num int
	var err error
	for range 2 {
		if c.conn == nil || c.conn.IsClosed() {
			var conn *pgx.Conn
			if conn, err = pgx.Connect(ctx, c.m.localDSN()+" application_name=daytwo-metrics"); err != nil {
				return "", 0, err
			}
			c.conn = conn
		}
		if err = c.conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('server_version_num')::int").Scan(&version, &num); err == nil {
			return version, num, nil
		}
		c.drop()
		if ctx.Err() != nil {
			break
		}
	}
	return "", 0, err
}

// queryAll runs each query group, and says whether PostgreSQL answered:
// its version, in time. A group that fails afterwards (a slow
// pg_database_size on a large cluster) costs its own figures only.
func (c *pgCollector) queryAll(ctx context.Context, ch chan<- prometheus.Metric, s instanceapi.Status) bool {
	version, versionNum, err := c.version(ctx)
	if err != nil {
		return false
	}
	role := string(s.Role)
	if role == "" {
		role = "unknown"
	}
	sample(ch, descInfo, prometheus.GaugeValue, 1, version, role)
	for _, q := range []struct {
		name string
		run  func(context.Context, *pgx.Conn, chan<- prometheus.Metric) error
	}{
		{"activity", collectActivity},
		{"databases", collectDatabases},
		{"replication", collectReplication},
		{"checkpoints", func(ctx context.Context, conn *pgx.Conn, ch chan<- prometheus.Metric) error {
			return collectCheckpoints(ctx, conn, ch, versionNum)
		}},
	} {
		if err := q.run(ctx, c.conn, ch); err != nil {
			c.queryErrors.WithLabelValues(q.name).Inc()
			if ctx.Err() != nil || c.conn.IsClosed() {
				// Out of time, or the connection broke: the figures left
				// wait for the next scrape, on a new connection.
				c.drop()
				break
			}
		}
	}
	return true
}

func (c *pgCollector) drop() {
	if c.conn != nil {
		_ = c.conn.Close(context.Background())
		c.conn = nil
	}
}

func collectActivity(ctx context.Context, conn *pgx.Conn, ch chan<- prometheus.Metric) error {
	rows, err := conn.Query(ctx, `SELECT COALESCE(datname, ''), COALESCE(state, 'unknown'), count(*)
		FROM pg_stat_activity WHERE backend_type = 'client backend' GROUP BY 1, 2`)
	if err != nil {
		return err
	}
	var datname, state string
	var n float64
	if _, err := pgx.ForEachRow(rows, []any{&datname, &state, &n}, func() error {
		sample(ch, descBackends, prometheus.GaugeValue, n, datname, state)
		return nil
	}); err != nil {
		return err
	}
	var maxConns, oldest, waiting float64
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::float8,
		COALESCE((SELECT max(EXTRACT(EPOCH FROM clock_timestamp() - xact_start)) FROM pg_stat_activity
			WHERE xact_start IS NOT NULL AND backend_type = 'client backend'), 0)::float8,
		(SELECT count(*) FROM pg_locks WHERE NOT granted)::float8`).Scan(&maxConns, &oldest, &waiting); err != nil {
		return err
	}
	sample(ch, descMaxConns, prometheus.GaugeValue, maxConns)
	sample(ch, descOldestXact, prometheus.GaugeValue, oldest)
	sample(ch, descLocksWaiting, prometheus.GaugeValue, waiting)
	return nil
}

func collectDatabases(ctx context.Context, conn *pgx.Conn, ch chan<- prometheus.Metric) error {
	rows, err := conn.Query(ctx, `SELECT d.datname, s.xact_commit::float8, s.xact_rollback::float8, s.deadlocks::float8,
		s.temp_bytes::float8, pg_database_size(d.oid)::float8
		FROM pg_database d JOIN pg_stat_database s ON s.datid = d.oid
		WHERE d.datallowconn AND NOT d.datistemplate`)
	if err != nil {
		return err
	}
	var datname string
	var commits, rollbacks, deadlocks, temp, size float64
	_, err = pgx.ForEachRow(rows, []any{&datname, &commits, &rollbacks, &deadlocks, &temp, &size}, func() error {
		sample(ch, descCommits, prometheus.CounterValue, commits, datname)
		sample(ch, descRollbacks, prometheus.CounterValue, rollbacks, datname)
		sample(ch, descDeadlocks, prometheus.CounterValue, deadlocks, datname)
		sample(ch, descTempBytes, prometheus.CounterValue, temp, datname)
		sample(ch, descDBSize, prometheus.GaugeValue, size, datname)
		return nil
	})
	return err
}

func collectReplication(ctx context.Context, conn *pgx.Conn, ch chan<- prometheus.Metric) error {
	var inRecovery bool
	var replay float64
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(),
		CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() IS NULL
			OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
		ELSE COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0) END::float8`).
		Scan(&inRecovery, &replay); err != nil {
		return err
	}
	if inRecovery {
		sample(ch, descReplay, prometheus.GaugeValue, replay)
	} else {
		// One series per replica: a clone's pg_basebackup streams under
		// one name twice, and a reconnecting replica may briefly have two
		// walsenders.
		rows, err := conn.Query(ctx, `SELECT application_name,
			max(COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0))::float8,
			max(COALESCE(EXTRACT(EPOCH FROM replay_lag), 0))::float8, bool_or(sync_state IN ('sync', 'quorum'))
			FROM pg_stat_replication WHERE state <> 'backup' AND application_name <> '' GROUP BY application_name`)
		if err != nil {
			return err
		}
		var name string
		var bytes, seconds float64
		var sync bool
		if _, err := pgx.ForEachRow(rows, []any{&name, &bytes, &seconds, &sync}, func() error {
			sample(ch, descLagBytes, prometheus.GaugeValue, bytes, name)
			sample(ch, descLagSeconds, prometheus.GaugeValue, seconds, name)
			sample(ch, descSyncState, prometheus.GaugeValue, boolFloat(sync), name)
			return nil
		}); err != nil {
			return err
		}
	}
	rows, err := conn.Query(ctx, `SELECT slot_name, active,
		COALESCE(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END,
			restart_lsn), 0)::float8
		FROM pg_replication_slots`)
	if err != nil {
		return err
	}
	var slot string
	var active bool
	var retained float64
	_, err = pgx.ForEachRow(rows, []any{&slot, &active, &retained}, func() error {
		sample(ch, descSlotBytes, prometheus.GaugeValue, max(retained, 0), slot)
		sample(ch, descSlotActive, prometheus.GaugeValue, boolFloat(active), slot)
		return nil
	})
	return err
}

// collectCheckpoints reads pg_stat_checkpointer (17 and later) or the
// columns it took from pg_stat_bgwriter (before).
func collectCheckpoints(ctx context.Context, conn *pgx.Conn, ch chan<- prometheus.Metric, versionNum int) error {
	q := `SELECT c.num_timed, c.num_requested, c.write_time, c.sync_time, c.buffers_written,
		b.buffers_clean, b.maxwritten_clean, b.buffers_alloc FROM pg_stat_checkpointer c, pg_stat_bgwriter b`
	if versionNum < 170000 {
		q = `SELECT checkpoints_timed, checkpoints_req, checkpoint_write_time, checkpoint_sync_time, buffers_checkpoint,
			buffers_clean, maxwritten_clean, buffers_alloc FROM pg_stat_bgwriter`
	}
	var v [8]float64
	// write_time and sync_time are milliseconds.
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT a::float8, b::float8, c::float8 / 1000, d::float8 / 1000, e::float8, f::float8, g::float8, h::float8 FROM (%s) AS s(a, b, c, d, e, f, g, h)", q)).
		Scan(&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]); err != nil {
		return err
	}
	for i, d := range []*prometheus.Desc{descCkptTimed, descCkptReq, descCkptWrite, descCkptSync, descCkptBuffers, descBgwClean, descBgwMaxWrite, descBuffersAlloc} {
		sample(ch, d, prometheus.CounterValue, v[i])
	}
	return nil
}

// sample sends one sample, unless its label values are not valid (a
// database name that is not UTF-8, say): the scrape skips it rather than
// the instance manager panicking.
func sample(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(d, t, v, labels...); err == nil {
		ch <- m
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsHandler serves the instance's figures, the instance manager's own
// process and Go runtime figures, and its query error counts.
func (m *Manager) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	queryErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_postgres_query_errors_total", Help: "Metrics queries that failed or ran out of time, by query group.",
	}, []string{"query"})
	reg.MustRegister(&pgCollector{m: m, queryErrors: queryErrors, turn: make(chan struct{}, 1)}, queryErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	// ContinueOnError: a sample the registry refuses costs itself, never
	// the whole scrape (and with it every series of the instance).
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 2 * metricsTimeout, ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// serveMetrics serves /metrics on Config.MetricsAddress until stop; an
// empty address serves nothing.
func (m *Manager) serveMetrics() (func(), error) {
	if m.cfg.MetricsAddress == "" {
		return func() {}, nil
	}
	_, stop, err := instanceapi.Serve(m.cfg.MetricsAddress, m.metricsHandler(), nil)
	return stop, err
}
