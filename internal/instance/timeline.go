package instance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/daytwo-dev/daytwo/internal/postgres"
)

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
