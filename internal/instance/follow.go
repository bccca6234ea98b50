package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

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

// wantsSlot: the operator lists this replica, so it streams through a slot.
func (m *Manager) wantsSlot() bool {
	r, err := m.cfg.replication()
	return err == nil && slices.Contains(r.Instances, m.cfg.Pod)
}

// errWALGone: the primary removed WAL the replica had not received (its
// slot was invalidated past max_slot_wal_keep_size, or it streamed
// without one), so the data can never catch up by streaming and is cloned
// again.
var errWALGone = errors.New("the primary removed WAL this replica needs: its replication slot was invalidated")

// errWALRemoved: the primary refused to stream from this replica's position
// because it removed that segment, whatever its slot says.
var errWALRemoved = fmt.Errorf("%w (the primary refuses to stream from this replica's position: the segment is removed)", errWALGone)

// slotState reads this replica's slot on the primary: whether it exists,
// and whether the primary invalidated it (no restart LSN: the WAL it
// held is gone).
func slotState(ctx context.Context, conn *pgconn.PgConn, slot string) (exists, lost bool, err error) {
	res, err := conn.Exec(ctx, "READ_REPLICATION_SLOT "+slot).ReadAll()
	if err != nil {
		return false, false, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 2 {
		return false, false, fmt.Errorf("READ_REPLICATION_SLOT answered %d results", len(res))
	}
	row := res[0].Rows[0]
	return row[0] != nil, row[0] != nil && row[1] == nil, nil
}

// reserveSlot creates this replica's slot on the primary over the
// replication protocol before postgres starts, so it streams through it at
// once, even before the primary's manager learns of a new instance, and
// the primary keeps the WAL a clone needs from before it starts. A slot
// the primary invalidated is made again, and the data marked to be cloned
// again (recloneMark). Any other failure is only logged, since the
// primary's manager makes the slot too.
func (m *Manager) reserveSlot(ctx context.Context) error {
	if !m.wantsSlot() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := m.primaryReplicationConn(ctx)
	if err != nil {
		m.log.Info("Could not reserve a replication slot on the primary yet", "reason", err.Error())
		return nil
	}
	defer func() { _ = conn.Close(context.Background()) }()
	slot := slotName(m.cfg.Pod)
	exists, lost, err := slotState(ctx, conn, slot)
	if err != nil {
		m.log.Info("Could not read this replica's slot on the primary", "slot", slot, "reason", err.Error())
		return nil
	}
	if lost {
		// Recorded first: once the slot is made again nothing else shows
		// that this data cannot catch up. A clone replaces the directory,
		// and the mark with it. (Only a running replica catches up from
		// the WAL archive: see cannotFollow.)
		if err := m.markData(recloneMark, errWALGone); err != nil {
			return err
		}
		return m.remakeSlot(ctx, conn, slot)
	}
	if !exists {
		m.createSlot(ctx, conn, slot)
	}
	return nil
}

// remakeSlot drops this replica's invalidated slot on the primary and
// makes it again.
func (m *Manager) remakeSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	if _, err := conn.Exec(ctx, "DROP_REPLICATION_SLOT "+slot).ReadAll(); err != nil {
		return fmt.Errorf("failed to drop the invalidated replication slot %s: %w", slot, err)
	}
	m.log.Info("Dropped this replica's invalidated replication slot on the primary", "slot", slot)
	m.createSlot(ctx, conn, slot)
	return nil
}

// createSlot makes this replica's slot on the primary, reserving WAL at
// once; a failure is only logged, since the primary's manager makes it too.
func (m *Manager) createSlot(ctx context.Context, conn *pgconn.PgConn, slot string) {
	_, err := conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+slot+" PHYSICAL RESERVE_WAL").ReadAll()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		m.log.Info("Reserved a replication slot on the primary", "slot", slot)
	case errors.As(err, &pgErr) && pgErr.Code == "42710": // duplicate_object: the primary's manager made it
	default:
		m.log.Info("Could not reserve a replication slot on the primary", "slot", slot, "reason", err.Error())
	}
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
	if s.Role != instanceapi.RoleReplica || !s.InRecovery || s.Phase != instanceapi.PhaseRunning {
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
	m.mu.Lock()
	rs := m.standbyWAL
	m.mu.Unlock()
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

// walSegmentSize is the WAL segment size daytwo's clusters run with
// (initdb's default; the archive assumes it too).
const walSegmentSize = 16 << 20

// timelineAt is the timeline that holds lsn, from the history file of the
// primary's timeline tli: the first entry whose switch point is past lsn.
func timelineAt(history string, tli int, lsn uint64) int {
	for _, e := range historyEntries(history) {
		if lsn < e.fork {
			return e.parent
		}
	}
	return tli
}

// segmentRemoved asks the primary to stream from lsn on timeline tli, and
// says whether it refused because it removed that WAL segment. The
// walsender answers CopyBoth first and reads the segment after, so the
// answer follows CopyBoth: WAL or a keepalive (nothing is missing), the
// error, or silence (the primary has nothing newer: nothing is missing
// either). A start at a timeline's very end ends the command at once,
// which says nothing is missing too. The stream is dropped with the
// connection.
func segmentRemoved(ctx context.Context, conn *pgconn.PgConn, tli int, lsn uint64) (bool, error) {
	conn.Frontend().Send(&pgproto3.Query{String: fmt.Sprintf("START_REPLICATION PHYSICAL %s TIMELINE %d", postgres.FormatLSN(lsn), tli)})
	if err := conn.Frontend().Flush(); err != nil {
		return false, err
	}
	// After CopyBoth the answer comes within a second, or not at all.
	rctx := ctx
	for {
		msg, err := conn.ReceiveMessage(rctx)
		if err != nil {
			if rctx != ctx && ctx.Err() == nil {
				return false, nil
			}
			return false, err
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyBothResponse:
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(ctx, time.Second)
			defer cancel()
		case *pgproto3.CopyData, *pgproto3.ReadyForQuery:
			return false, nil
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(msg)
			if pgErr.Code == "58P01" { // undefined_file: "requested WAL segment ... has already been removed"
				return true, nil
			}
			return false, pgErr
		}
	}
}

// primaryTimeline asks the primary for its timeline and that timeline's
// history file (empty on timeline 1).
func primaryTimeline(ctx context.Context, conn *pgconn.PgConn) (int, string, error) {
	res, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
	if err != nil {
		return 0, "", err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 2 {
		return 0, "", errors.New("IDENTIFY_SYSTEM answered no row")
	}
	tli, err := strconv.Atoi(string(res[0].Rows[0][1]))
	if err != nil || tli <= 1 {
		return tli, "", err
	}
	res, err = conn.Exec(ctx, fmt.Sprintf("TIMELINE_HISTORY %d", tli)).ReadAll()
	if err != nil {
		return 0, "", err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 2 {
		return 0, "", errors.New("TIMELINE_HISTORY answered no row")
	}
	return tli, string(res[0].Rows[0][1]), nil
}

// replayedPastFork reads a timeline history file ("parent<TAB>switchpoint
// <TAB>reason" per line): a replica that replayed up to replayed on
// timeline tli cannot follow when the history forked off tli before that,
// or never passed through tli at all.
func replayedPastFork(history string, tli int, replayed uint64) bool {
	for _, e := range historyEntries(history) {
		if e.parent == tli {
			return replayed > e.fork
		}
	}
	return true
}

// historyEntry is a line of a timeline history file: the timeline parent
// ended at fork.
type historyEntry struct {
	parent int
	fork   uint64
}

// historyEntries reads a timeline history file, oldest first, skipping
// comments and lines it cannot read.
func historyEntries(history string) []historyEntry {
	var out []historyEntry
	for _, line := range strings.Split(history, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		parent, err := strconv.Atoi(f[0])
		fork, ok := postgres.ParseLSN(f[1])
		if err == nil && ok {
			out = append(out, historyEntry{parent, fork})
		}
	}
	return out
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
