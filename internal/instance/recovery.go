package instance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// Recovery is where a physical restore (point-in-time recovery) comes
// from: the base backups and the WAL archive under Prefix, replayed to a
// target, or to the archive's end when it names none.
type Recovery struct {
	Storage backup.Storage
	Prefix  string
	// Keys: the base backup's manifest and every WAL file must verify
	// under Keys.Seal, and what is encrypted is decrypted with
	// Keys.Encrypt. KeyMissing: a seal key was required and none given,
	// so nothing is restored.
	Keys       backup.Keys
	KeyMissing bool
	// BackupID names the base backup; empty picks the newest one that is
	// consistent before the target.
	BackupID string
	// TargetTime and TargetLSN: at most one is set.
	TargetTime time.Time
	TargetLSN  string
	// Ahead is how many WAL segments are fetched ahead of replay.
	Ahead int
}

// Validate refuses a target PostgreSQL would not take.
func (r *Recovery) Validate() error {
	if !r.TargetTime.IsZero() && r.TargetLSN != "" {
		return errors.New("set a target time or a target LSN, not both")
	}
	if _, ok := postgres.ParseLSN(r.TargetLSN); r.TargetLSN != "" && !ok {
		return fmt.Errorf("target LSN %q is not an LSN such as 0/3000060", r.TargetLSN)
	}
	return nil
}

// UseRecovery makes a primary that bootstraps from a backup (FromBackup)
// restore a base backup and replay the WAL archive to r's target.
func (m *Manager) UseRecovery(r *Recovery) { m.recovery = r }

// recoveryEndedEarly is how PostgreSQL says the archive ended before the
// target: it stops, and the data directory is never served.
const recoveryEndedEarly = "recovery ended before configured recovery target was reached"

// recoverFromArchive builds a data directory in dir (the staging directory)
// from a base backup and the WAL archive, replayed to the target by a
// server on the local socket only. Replay runs without hot standby: the
// base backup's server may have run with larger settings than this one
// (a hot standby refuses to start below them), and nobody may read a
// database that has not reached its target anyway. PostgreSQL itself
// refuses to finish short of a target (recoveryEndedEarly). Progress is
// in the status (Status.Recovery) while it runs.
func (m *Manager) recoverFromArchive(ctx context.Context, dir string) (err error) {
	r := m.recovery
	b, err := m.chooseBase(ctx)
	if err != nil {
		return err
	}
	m.log.Info("Restoring a base backup", "id", b.ID, "endLSN", b.EndLSN, "finished", b.Finished)
	if err := wal.ExtractBase(ctx, r.Storage, r.Prefix, b, dir, r.Keys); err != nil {
		return err
	}
	out, err := m.controlData(ctx, dir)
	if err != nil {
		return err
	}
	segSize, err := strconv.ParseInt(parseControlData(out)["Bytes per WAL segment"], 10, 64)
	if err != nil {
		return fmt.Errorf("pg_controldata gave no WAL segment size: %w", err)
	}
	progress := &instanceapi.RecoveryProgress{BaseBackup: b.ID, TargetLSN: r.TargetLSN}
	if !r.TargetTime.IsZero() {
		progress.TargetTime = &r.TargetTime
	}
	end, _ := postgres.ParseLSN(r.TargetLSN)
	if r.TargetLSN == "" {
		if end, err = wal.ArchiveEnd(ctx, r.Storage, r.Prefix, segSize); err != nil {
			return err
		}
	}
	progress.EndLSN = postgres.FormatLSN(end)

	prefetch := filepath.Clean(m.cfg.PGData) + ".prefetch"
	restorer := &wal.Restorer{Storage: r.Storage, Prefix: r.Prefix, Keys: r.Keys, Dir: prefetch, Ahead: cmp.Or(r.Ahead, 8), SegmentSize: segSize}
	start, _ := postgres.ParseLSN(b.StartLSN)
	run := &replay{restorer: restorer, base: *progress, start: start, end: end, segSize: segSize, began: time.Now()}
	m.shared.mu.Lock()
	m.shared.replay, m.shared.status.Recovery = run, nil
	m.shared.mu.Unlock()
	defer func() {
		m.shared.mu.Lock()
		m.shared.replay = nil
		if err != nil {
			// The last progress stays in the status beside the error.
			p := run.progress(time.Now())
			m.shared.status.Recovery = &p
		}
		m.shared.mu.Unlock()
		_ = os.RemoveAll(prefetch)
	}()

	if err := m.writeConfig(dir); err != nil {
		return err
	}
	// A base backup taken from a standby carries its standby.signal:
	// recovery in standby mode never ends at the archive's end.
	if err := os.Remove(filepath.Join(dir, "standby.signal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "recovery.signal"), nil, 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	settings := []string{
		fmt.Sprintf("restore_command=%s instance wal-restore --socket %s %%f %%p", self, ArchiveSocket(m.cfg.RunDir)),
		"recovery_target_action=promote", "hot_standby=off", "archive_mode=off",
	}
	switch {
	case !r.TargetTime.IsZero():
		settings = append(settings, "recovery_target_time="+r.TargetTime.Format("2006-01-02 15:04:05.999999-07:00"))
	case r.TargetLSN != "":
		settings = append(settings, "recovery_target_lsn="+r.TargetLSN)
	}
	srv, err := m.startLocalOnly(ctx, dir, settings...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.stopLocal(srv)) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case exit := <-srv.exited:
			srv.exited <- exit // stopLocal waits for it too
			log := srv.stderr.String()
			if strings.Contains(log, recoveryEndedEarly) {
				return fmt.Errorf("the WAL archive ends before the recovery target (%s): no WAL past it is archived, so the "+
					"database is not restored; archive more, or choose an earlier target", targetText(r))
			}
			return fmt.Errorf("postgres stopped during recovery (%w): %s", exit, postgres.LastLines([]byte(log), 3))
		case <-tick.C:
		}
		if m.recovered(ctx, dir) {
			if r.TargetTime.IsZero() && r.TargetLSN == "" && end > uint64(segSize) {
				// To the archive's end: a segment missing in the middle
				// would end recovery early without a word from PostgreSQL.
				at, err := m.currentLSN(ctx)
				if err != nil {
					return err
				}
				if at < end-uint64(segSize) {
					return fmt.Errorf("recovery ended at %s, before the newest archived segment (which ends at %s): "+
						"a WAL segment between them is missing from the archive", postgres.FormatLSN(at), postgres.FormatLSN(end))
				}
			}
			if err := markHistoryReady(dir); err != nil {
				return err
			}
			m.log.Info("Recovered to the target", "target", targetText(r), "took", time.Since(run.began).Round(time.Millisecond),
				"restored", restorer.Stats().Restored)
			return nil
		}
	}
}

// chooseBase finds the base backup a recovery starts from.
func (m *Manager) chooseBase(ctx context.Context) (wal.BaseBackup, error) {
	return chooseBaseOf(ctx, m.recovery)
}

// chooseBaseOf finds the base backup under r a recovery to r's target
// starts from.
func chooseBaseOf(ctx context.Context, r *Recovery) (wal.BaseBackup, error) {
	if r.KeyMissing {
		return wal.BaseBackup{}, backup.ErrNoSeriesKey
	}
	if r.BackupID != "" {
		return wal.FindBase(ctx, r.Storage, r.Prefix, r.BackupID, r.Keys)
	}
	bases, err := wal.ListBases(ctx, r.Storage, r.Prefix, r.Keys)
	if err != nil {
		return wal.BaseBackup{}, err
	}
	b, ok := wal.ChooseBase(bases, r.TargetTime, r.TargetLSN)
	if !ok {
		return b, fmt.Errorf("none of the %d base backups at %q is consistent before the recovery target (%s)",
			len(bases), r.Prefix, targetText(r))
	}
	return b, nil
}

func targetText(r *Recovery) string {
	switch {
	case !r.TargetTime.IsZero():
		return "time " + r.TargetTime.Format(time.RFC3339Nano)
	case r.TargetLSN != "":
		return "LSN " + r.TargetLSN
	default:
		return "the end of the archive"
	}
}

// replay is a running recovery from the archive: what Status reports of
// it is worked out when asked, so a replay shorter than any polling
// interval is still seen.
type replay struct {
	restorer   *wal.Restorer
	base       instanceapi.RecoveryProgress // the base backup, target and end
	start, end uint64
	segSize    int64
	began      time.Time
}

// progress estimates how far replay has come from the WAL segments handed
// to it: a server without hot standby answers no query.
func (r *replay) progress(now time.Time) instanceapi.RecoveryProgress {
	p := r.base
	st := r.restorer.Stats()
	p.Restored, p.Prefetched = st.Restored, st.Prefetched
	if len(st.Last) != 24 {
		return p
	}
	at := wal.SegmentStart(st.Last, r.segSize)
	p.ReplayedLSN = postgres.FormatLSN(at)
	if took := now.Sub(r.began); at > r.start && took > 0 {
		p.BytesPerSecond = int64(float64(at-r.start) / took.Seconds())
	}
	if p.BytesPerSecond > 0 && r.end > at {
		p.RemainingSeconds = int64(r.end-at) / p.BytesPerSecond
	}
	return p
}

// recovered says whether the local server on dir finished recovery. The
// control file says so first (asking with a connection every second would
// log a refusal every second of a long replay); a connection confirms it.
func (m *Manager) recovered(ctx context.Context, dir string) bool {
	out, err := m.controlData(ctx, dir)
	if err != nil || parseControlData(out)["Database cluster state"] != "in production" {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, m.localDSN())
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close(ctx) }()
	var inRecovery bool
	if err := conn.QueryRow(cctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return false
	}
	return !inRecovery
}

// currentLSN is pg_current_wal_lsn() of the local server.
func (m *Manager) currentLSN(ctx context.Context) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, m.localDSN())
	if err != nil {
		return 0, fmt.Errorf("failed to connect after recovery: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var lsn string
	if err := conn.QueryRow(cctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return 0, fmt.Errorf("failed to read the WAL position after recovery: %w", err)
	}
	at, ok := postgres.ParseLSN(lsn)
	if !ok {
		return 0, fmt.Errorf("unreadable WAL position %q", lsn)
	}
	return at, nil
}

// markHistoryReady announces the new timeline's history file for archiving:
// recovery ran with archive_mode off, so PostgreSQL did not, and the
// restored Database's archive would lack its timeline's history.
func markHistoryReady(dir string) error {
	walDir := filepath.Join(dir, "pg_wal")
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".history") {
			continue
		}
		status := filepath.Join(walDir, "archive_status", e.Name())
		if fileExists(status+".done") || fileExists(status+".ready") {
			continue
		}
		if err := os.WriteFile(status+".ready", nil, 0o600); err != nil {
			return err
		}
	}
	return nil
}
