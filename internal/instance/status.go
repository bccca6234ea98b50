package instance

import (
	"path/filepath"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func (m *Manager) setPhase(p instanceapi.Phase, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Phase, m.status.Message = p, msg
	if p != instanceapi.PhaseRunning {
		// Positions are what a running server reports: a failover must not
		// rank this instance by what it had before it stopped.
		m.status.LSN, m.status.ReceivedLSN, m.status.Streaming = "", "", false
		m.status.Standbys = nil
		m.notStreamingSince, m.streamed, m.streamLost = time.Time{}, false, time.Time{}
	}
}

func (m *Manager) setMessage(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Message = msg
}

// Status returns a copy of the current status.
func (m *Manager) Status() instanceapi.Status {
	// Before mu: a promise being given holds its lock over a file write.
	now := time.Now()
	promisedTo, promised := m.promise.active(now)
	vouchedFor, vouchedLSN := m.promise.vouched()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.status
	s.PendingRestartSettings = append([]string(nil), s.PendingRestartSettings...)
	if m.replay != nil {
		r := m.replay.progress(time.Now())
		s.Recovery = &r
	} else if s.Recovery != nil {
		r := *s.Recovery
		s.Recovery = &r
	}
	if m.archiver != nil {
		s.Archive = archiveStatus(m.archiver.Stats())
		m.backlog.fill(s.Archive, filepath.Join(m.cfg.PGData, "pg_wal"), time.Now())
	}
	if promised {
		s.PromisedTo = promisedTo
	}
	s.VouchedFor, s.VouchedLSN = vouchedFor, vouchedLSN
	s.ServingOnPromises = s.Role == instanceapi.RolePrimary && s.Phase == instanceapi.PhaseRunning && m.lease != nil &&
		!now.Before(m.leaseUntil) && m.vouch.covers(now)
	return s
}

// role is what the instance runs as now (a promotion changes it).
func (m *Manager) role() instanceapi.Role {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status.Role
}

func (m *Manager) setRole(r instanceapi.Role) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Role = r
	m.cfg.Role = r
	if r != instanceapi.RolePrimary {
		m.leaseUntil = time.Time{} // a term handed on is not this instance's to count on
		m.vouch.reset()
		m.promise.reopen()
	}
}
