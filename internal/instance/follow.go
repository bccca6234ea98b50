package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// A replica follows whichever instance the lease names. Two things stop
// it for good, and a restart fixes neither: the primary removed WAL it
// still needs (errWALGone: it is cloned again), or it replayed WAL past the
// point where the primary's timeline forked off its own (errDiverged: it
// is rewound). A replica that has not streamed for followCheckAfter asks
// the primary which, if either, it is.

// primaryReplicationConn opens a replication-protocol connection to the
// primary as the replication user, for slot and timeline commands.
func (m *Manager) primaryReplicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	pw, err := m.cfg.secret(instanceapi.SecretReplicationPassword)
	if err != nil {
		return nil, err
	}
	host, port := m.upstream()
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=replication replication=true connect_timeout=3",
		host, port, replicationUser) + m.cfg.sslParams())
	if err != nil {
		return nil, err
	}
	cfg.Password = pw
	return pgconn.ConnectConfig(ctx, cfg)
}

// recloneMark, in the data directory, says the data is to be cloned again
// (see errWALGone).
const recloneMark = "daytwo-reclone"

// errDiverged: this replica replayed WAL of an old timeline past the point
// where the primary's timeline forked off it (it was ahead of the replica
// that was promoted), so it cannot follow; pg_rewind undoes the rest.
var errDiverged = errors.New("this replica replayed WAL past the point where the primary's timeline forked off its own")

// rewindMark, in the data directory, says the replica is to be rewound
// before it starts again (see errDiverged).
const rewindMark = "daytwo-rewind"

// followCheckAfter is how long a replica may fail to stream before it asks
// the primary why, and how often it asks again.
const followCheckAfter = 10 * time.Second

// followWatch tracks a replica that does not stream.
type followWatch struct {
	notStreaming, checked time.Time
	// replayed is where replay stood when the stretch began: a replica
	// that replays (from the archive, say) is not stuck.
	replayed string
	// timeline is the newest timeline this replica replayed, as it saw it.
	timeline int
	// fromArchiveAt is where replay stood when the replica was last left
	// to catch up from the WAL archive, and fromArchiveRestored how many
	// files the archive had handed it then; slotRemakes counts the slots
	// it made again meanwhile (see catchUpFromArchive).
	fromArchiveAt       string
	fromArchiveRestored int
	slotRemakes         int
}

// cannotFollow, on a replica that has not streamed for followCheckAfter,
// asks the primary whether it ever can: errWALGone, errDiverged or nil.
func (m *Manager) cannotFollow(ctx context.Context, w *followWatch) error {
	s := m.Status()
	now := time.Now()
	if s.Role != instanceapi.RoleReplica || !s.InRecovery || s.Phase != instanceapi.PhaseRunning || following(m.holderName()) {
		w.notStreaming, w.checked = time.Time{}, time.Time{}
		return nil
	}
	w.timeline = max(w.timeline, s.Timeline)
	if s.Streaming || (!w.notStreaming.IsZero() && s.LSN != w.replayed) {
		w.notStreaming = time.Time{}
	}
	if s.Streaming {
		w.fromArchiveAt, w.fromArchiveRestored, w.slotRemakes = "", 0, 0
		return nil
	}
	if w.notStreaming.IsZero() {
		w.notStreaming, w.replayed = now, s.LSN
	}
	if now.Sub(w.notStreaming) < followCheckAfter || now.Sub(w.checked) < followCheckAfter {
		return nil
	}
	w.checked = now
	replayed, ok := postgres.ParseLSN(s.LSN)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := m.primaryReplicationConn(ctx)
	if err != nil {
		m.log.Info("Could not ask the primary why this replica does not stream", "reason", err.Error())
		return nil
	}
	defer func() { _ = conn.Close(context.Background()) }()
	lost := false
	if m.wantsSlot() {
		if _, lost, err = slotState(ctx, conn, slotName(m.cfg.Pod)); err != nil {
			m.log.Info("Could not read this replica's slot on the primary", "reason", err.Error())
		}
	}
	if w.timeline == 0 && !lost {
		return nil
	}
	tli, history, err := primaryTimeline(ctx, conn)
	if err != nil {
		if lost {
			return errWALGone
		}
		return nil
	}
	if w.timeline != 0 && tli > w.timeline && replayedPastFork(history, w.timeline, replayed) {
		m.log.Info("Diverged from the primary's timeline", "timeline", w.timeline, "replayed", s.LSN, "primaryTimeline", tli)
		return errDiverged
	}
	// A slot that looks whole proves nothing when the replica streamed
	// without it for a while, or the primary made it again: the primary's
	// own answer to a stream from where the walreceiver would start does.
	// That is the start of the segment of what it received (which may be
	// ahead of replay: the slot follows what it flushed), on the timeline
	// the primary's history gives that position.
	from := replayed
	if received, ok := postgres.ParseLSN(s.ReceivedLSN); ok && received > from {
		from = received
	}
	from -= from % walSegmentSize
	segTLI := timelineAt(history, tli, from)
	removed, err := segmentRemoved(ctx, conn, segTLI, from)
	if err != nil {
		m.log.Info("Could not ask the primary to stream from this replica's position", "lsn", s.LSN, "reason", err.Error())
		if lost {
			return errWALGone
		}
		return nil
	}
	if removed || lost {
		return m.catchUpFromArchive(ctx, conn, w, s.LSN, removed, lost, segTLI, tli, from)
	}
	m.log.Info("Not streaming, though the primary still has the WAL this replica needs", "lsn", s.LSN, "timeline", w.timeline,
		"since", w.notStreaming.Format(time.RFC3339))
	return nil
}

// maxSlotRemakes bounds how often a replica catching up from the archive
// makes its slot again: one that falls behind again each time (replay
// slower than the primary writes) is cloned instead.
const maxSlotRemakes = 3

// catchUpFromArchive decides for a running replica whose primary removed
// WAL it needs (removed) or invalidated its slot (lost). The archive,
// when there is one, serves what the primary removed: restore_command
// catches the replica up, and it streams again from where the archive
// ends. It is trusted while it makes progress (replay moved, or the
// archive handed out files since the last check); otherwise, and without
// an archive, the data is cloned again (errWALRemoved, errWALGone).
// segTLI is the timeline the primary's history gives from, tli the
// primary's own: at a fork, the archive holds the segment under the new
// timeline's name.
func (m *Manager) catchUpFromArchive(ctx context.Context, conn *pgconn.PgConn, w *followWatch, lsn string, removed, lost bool,
	segTLI, tli int, from uint64) error {
	m.shared.mu.Lock()
	rs := m.shared.standbyWAL
	m.shared.mu.Unlock()
	restored := -1
	if rs != nil {
		restored = rs.Stats().Restored
	}
	progress := w.fromArchiveAt == "" || lsn != w.fromArchiveAt || restored != w.fromArchiveRestored
	name := wal.SegmentName(segTLI, from, walSegmentSize)
	archived := rs != nil && progress && w.slotRemakes < maxSlotRemakes &&
		(m.archiveHolds(ctx, name) || (tli != segTLI && m.archiveHolds(ctx, wal.SegmentName(tli, from, walSegmentSize))))
	switch {
	case removed && !archived:
		return errWALRemoved
	case !archived && (rs == nil || w.slotRemakes >= maxSlotRemakes):
		// Without an archive, keep to what is proven: a lost slot means
		// the data is cloned again.
		return errWALGone
	}
	if lost {
		// The walreceiver cannot stream through an invalidated slot.
		if err := m.remakeSlot(ctx, conn, slotName(m.cfg.Pod)); err != nil {
			m.log.Info("Could not make this replica's slot again", "reason", err.Error())
			return errWALGone
		}
		w.slotRemakes++
	}
	if archived {
		w.fromArchiveAt, w.fromArchiveRestored = lsn, restored
		m.log.Info("The primary removed WAL this replica needs: catching up from the WAL archive", "segment", name)
	}
	return nil
}

// markData leaves a mark file in the data directory, if there is one.
func (m *Manager) markData(name string, why error) error {
	if !hasData(m.cfg.PGData) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(m.cfg.PGData, name), []byte(why.Error()+"\n"), 0o600); err != nil {
		return fmt.Errorf("failed to leave %s in the data directory: %w", name, err)
	}
	return nil
}

// marked says whether the data directory holds the mark file name.
func (m *Manager) marked(name string) bool {
	_, err := os.Stat(filepath.Join(m.cfg.PGData, name))
	return err == nil
}
