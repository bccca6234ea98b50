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
// The fence is kept on the data volume beside the data directory
// (fencedFile), so a restart of the container or of the manager keeps it,
// and a clone or a rewind that replaces the data directory neither loses
// nor copies it, until the operator lifts it. A primary fenced so shuts
// down cleanly and releases its lease with its last checkpoint: failover
// promotes an instance that is not fenced (a fenced one is never weighed),
// as for any primary that stopped. Every start of postgres checks the
// fence under the same lock its request takes, so a fence that arrives
// between runs is never lost.

// fencedFile is where a fence on request is kept, beside PGDATA.
func (c *Config) fencedFile() string {
	return filepath.Join(filepath.Dir(filepath.Clean(c.PGData)), "daytwo-fenced")
}

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
	m.fenceMu.Lock()
	defer m.fenceMu.Unlock()
	mark := m.cfg.fencedFile()
	var kept error
	switch {
	case on:
		// Fenced all the same when the mark cannot be written (a full
		// disk, say): in memory, until the manager restarts.
		if kept = writeFileSynced(mark, "fenced on request\n"); kept != nil {
			m.log.Error(kept, "Failed to keep the fence on the data volume; it holds until the manager restarts")
		}
	default:
		if err := os.Remove(mark); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	m.shared.mu.Lock()
	changed := m.shared.status.FencedOnRequest != on
	m.shared.status.FencedOnRequest = on
	if !on && m.shared.status.Phase == instanceapi.PhaseFenced {
		// Not ready from now on (see ready), until postgres runs again.
		m.shared.status.Phase, m.shared.status.Message = instanceapi.PhaseStarting, "the fence on request was lifted"
	}
	fence := m.shared.runFence
	m.shared.mu.Unlock()
	if changed {
		m.log.Info("Fence on request", "fenced", on)
	}
	// A run under way is stopped whether or not the flag changed: a run
	// that started before the flag was set must not outlive it.
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
	if _, err := os.Stat(m.cfg.fencedFile()); err != nil {
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
	for m.fencedOnRequest() {
		m.setPhase(instanceapi.PhaseFenced, "fenced on request (spec.fencedInstances): postgres stays stopped until the fence is lifted")
		m.shared.mu.Lock()
		m.shared.restarting = false // a restart in place that the fence cut short is over
		m.shared.mu.Unlock()
		if m.lease != nil {
			// On every pass: a lease that names this instance (a failover
			// may still move it here) is given up, so failover promotes
			// another, and the operator, which does not ask a holder whose
			// renewed lease ran out, goes on asking this one. Release
			// leaves a lease that names another alone.
			_ = m.lease.Release(ctx, m.cfg.Pod, "")
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

// writeFileSynced writes path atomically and durably: the file and its
// directory are synced.
func writeFileSynced(path, content string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}
