package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// errSwitchedOver: the primary shut down cleanly and handed its lease to a
// replica; the next round starts it again as a replica of that one.
var errSwitchedOver = errors.New("switched over")

// demoteRequest travels from the API handler to the supervisor, which owns
// the postgres process.
type demoteRequest struct {
	to, request string
	done        chan demoteResult
}

type demoteResult struct {
	lsn string
	err error
}

// handleDemote is the old primary's half of a switchover (see
// instanceapi.PathDemote). The supervisor does the work; this waits for it.
func (m *Manager) handleDemote(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.DemoteRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.To == "" || req.To == m.cfg.Pod {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: "the body must name another instance in \"to\""})
		return
	}
	if s := m.Status(); m.lease == nil || s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning {
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: fmt.Sprintf("instance is a %s in phase %s", s.Role, s.Phase)})
		return
	}
	d := demoteRequest{to: req.To, request: req.Request, done: make(chan demoteResult, 1)}
	select {
	case m.demote <- d:
	default:
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: "a switchover is already under way"})
		return
	}
	select {
	case res := <-d.done:
		if res.err != nil {
			writeJSON(w, http.StatusInternalServerError, instanceapi.Error{Message: res.err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, instanceapi.DemoteResult{LSN: res.lsn})
	case <-r.Context().Done():
	}
}

// switchOver runs in the supervisor: a fast (clean) shutdown, whose
// checkpoint the streaming replicas receive before postgres exits, then the
// lease handed to the replica with that checkpoint's LSN, and new
// connections forwarded to it for a while (forwardTo). If the handover
// fails, the lease is still this instance's and it starts again as the
// primary.
func (m *Manager) switchOver(d demoteRequest, stop func() error) error {
	m.log.Info("Switching over: stopping postgres cleanly", "to", d.to)
	if err := stop(); err != nil {
		d.done <- demoteResult{err: err}
		return err
	}
	lsn, err := m.shutdownCheckpoint()
	token := ""
	if err == nil && demoting(d.to) {
		// Bounded: the operator's call waits for the answer. Failed, the
		// instance starts again as the primary and the operator asks again.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		token, err = m.shipLastWAL(ctx)
		cancel()
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.lease.HandOver(ctx, m.cfg.Pod, d.to, lsn, d.request, token)
		cancel()
	}
	if err != nil {
		d.done <- demoteResult{lsn: lsn, err: err}
		m.log.Error(err, "Switchover failed; starting again as the primary")
		return fmt.Errorf("%w: the handover to %s failed: %v", errSwitchedOver, d.to, err) //nolint:errorlint // errSwitchedOver alone decides what the caller does
	}
	m.log.Info("Handed the primary lease over", "to", d.to, "lsn", lsn)
	// Before the answer: the operator promotes the new primary next. A
	// demoted Database has none here to forward to.
	if !demoting(d.to) {
		m.forwardTo(d.to)
	}
	d.done <- demoteResult{lsn: lsn}
	return fmt.Errorf("%w to %s at %s", errSwitchedOver, d.to, lsn)
}

// shutdownCheckpoint reads the LSN of the checkpoint a clean shutdown wrote
// last, from pg_controldata.
func (m *Manager) shutdownCheckpoint() (string, error) {
	out, err := exec.Command(m.cfg.bin("pg_controldata"), m.cfg.PGData).Output()
	if err != nil {
		return "", fmt.Errorf("failed to run pg_controldata: %w", err)
	}
	state, lsn := "", ""
	for line := range strings.Lines(string(out)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Database cluster state":
			state = strings.TrimSpace(v)
		case "Latest checkpoint location":
			lsn = strings.TrimSpace(v)
		}
	}
	if state != "shut down" || lsn == "" {
		return "", fmt.Errorf("postgres did not shut down cleanly (state %q)", state)
	}
	return lsn, nil
}

// waitReceived waits, on a replica about to be promoted in a switchover,
// until it has received WAL up to lsn.
func waitReceived(ctx context.Context, conn *pgx.Conn, lsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var done bool
		err := conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_receive_lsn() >= $1::pg_lsn, false)", lsn).Scan(&done)
		if err == nil && done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica has not received the old primary's WAL up to %s", lsn)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
