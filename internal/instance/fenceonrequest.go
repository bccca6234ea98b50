package instance

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Fencing on request (spec.fencedInstances): the operator asks an
// instance to stop postgres and keep it stopped, for forensics, while the
// pod and its manager run on (exec into it, read the data directory).
// The fence is kept in the data directory (fencedMark), so a restart of
// the container or of the manager keeps it, until the operator lifts it.
// A primary fenced so stops serving, and its lease runs out: failover
// promotes a replica that is not fenced, as for any primary that stopped.

// fencedMark, in the data directory, keeps a fence on request.
const fencedMark = "daytwo-fenced"

// errFencedOnRequest stops a run of postgres fenced on request.
var errFencedOnRequest = errors.New("fenced on request (spec.fencedInstances)")

// handleFence fences the instance on request, or lifts the fence.
func (m *Manager) handleFence(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.FenceRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: "the body must be a FenceRequest: " + err.Error()})
		return
	}
	if err := m.fenceOnRequest(req.Fenced); err != nil {
		writeJSON(w, http.StatusInternalServerError, instanceapi.Error{Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, m.Status())
}

// fenceOnRequest records the fence (or its end) in the data directory
// first, then stops the run of postgres under way, or lets the supervisor
// start it again.
func (m *Manager) fenceOnRequest(on bool) error {
	mark := filepath.Join(m.cfg.PGData, fencedMark)
	switch {
	case on:
		if err := writeFileAtomic(mark, "fenced on request\n"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	default:
		if err := os.Remove(mark); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	m.shared.mu.Lock()
	changed := m.shared.status.FencedOnRequest != on
	m.shared.status.FencedOnRequest = on
	fence := m.shared.runFence
	m.shared.mu.Unlock()
	if !changed {
		return nil
	}
	m.log.Info("Fence on request", "fenced", on)
	if on && fence != nil {
		select {
		case fence <- errFencedOnRequest:
		default: // a fence is on its way already
		}
	}
	if !on {
		select {
		case m.unfenced <- struct{}{}:
		default:
		}
	}
	return nil
}

// fencedOnRequest says whether the instance is fenced on request, as
// asked since the manager started or as the data directory's mark says.
func (m *Manager) fencedOnRequest() bool {
	m.shared.mu.Lock()
	on := m.shared.status.FencedOnRequest
	m.shared.mu.Unlock()
	if on {
		return true
	}
	if _, err := os.Stat(filepath.Join(m.cfg.PGData, fencedMark)); err != nil {
		return false
	}
	m.shared.mu.Lock()
	m.shared.status.FencedOnRequest = true
	m.shared.mu.Unlock()
	return true
}

// waitWhileFenced keeps postgres from starting while the instance is
// fenced on request.
func (m *Manager) waitWhileFenced(ctx context.Context) error {
	released := false
	for m.fencedOnRequest() {
		m.setPhase(instanceapi.PhaseStopping, "fenced on request (spec.fencedInstances): postgres stays stopped until the fence is lifted")
		if !released && m.lease != nil {
			// A primary fenced gives its lease up: failover promotes
			// another at once, and the operator, which does not ask a
			// holder whose renewed lease ran out, goes on asking this one.
			// (Release leaves a lease this instance does not hold alone.)
			released = m.lease.Release(ctx, m.cfg.Pod, "") == nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.unfenced:
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}
