package instance

import (
	"path/filepath"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func (m *Manager) setPhase(p instanceapi.Phase, msg string) {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	m.shared.status.Phase, m.shared.status.Message = p, msg
	if p != instanceapi.PhaseRunning {
		// Positions are what a running server reports: a failover must not
		// rank this instance by what it had before it stopped.
		m.shared.status.LSN, m.shared.status.ReceivedLSN, m.shared.status.Streaming = "", "", false
		m.shared.status.Standbys = nil
		m.shared.notStreamingSince, m.shared.streamed, m.shared.streamLost = time.Time{}, false, time.Time{}
	}
}

func (m *Manager) setMessage(msg string) {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	m.shared.status.Message = msg
}

// Status returns a copy of the current status.
func (m *Manager) Status() instanceapi.Status {
	// Before mu: a promise being given holds its lock over a file write.
	now := time.Now()
	promisedTo, promised := m.promise.active(now)
	vouchedFor, vouchedLSN := m.promise.vouched()
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	s := m.shared.status
	s.PendingRestartSettings = append([]string(nil), s.PendingRestartSettings...)
	if m.shared.replay != nil {
		r := m.shared.replay.progress(time.Now())
		s.Recovery = &r
	} else if s.Recovery != nil {
		r := *s.Recovery
		s.Recovery = &r
	}
	if m.shared.archiver != nil {
		s.Archive = archiveStatus(m.shared.archiver.Stats())
		m.shared.backlog.fill(s.Archive, filepath.Join(m.cfg.PGData, "pg_wal"), time.Now())
	}
	if promised {
		s.PromisedTo = promisedTo
	}
	s.VouchedFor, s.VouchedLSN = vouchedFor, vouchedLSN
	s.Source = m.sourceProgress(&s)
	s.ServingOnPromises = s.Role == instanceapi.RolePrimary && s.Phase == instanceapi.PhaseRunning && m.lease != nil &&
		!now.Before(m.shared.leaseUntil) && m.vouch.covers(now)
	return s
}

// role is what the instance runs as now (a promotion changes it).
func (m *Manager) role() instanceapi.Role {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	return m.shared.status.Role
}

func (m *Manager) setRole(r instanceapi.Role) {
	m.shared.mu.Lock()
	m.shared.status.Role = r
	m.cfg.Role = r
	if r != instanceapi.RolePrimary {
		m.shared.leaseUntil = time.Time{} // a term handed on is not this instance's to count on
	}
	m.shared.mu.Unlock()
	// After mu: a promise being given holds its own lock over a file
	// write, which readers of mu must not wait for.
	if r != instanceapi.RolePrimary {
		m.vouch.reset()
		m.promise.reopen()
	}
}
