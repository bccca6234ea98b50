package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// startPrimaryDuties starts, once per run of postgres as a primary, the
// heartbeat commit that lease renewals depend on, and the lease guard if
// the run started as a replica (a promotion). It reports whether they run.
func (m *Manager) startPrimaryDuties(ctx context.Context, fence chan<- error) bool {
	s := m.Status()
	if m.lease == nil || s.Role != instanceapi.RolePrimary || s.InRecovery || s.Phase != instanceapi.PhaseRunning {
		return false
	}
	go m.heartbeat(ctx) //nolint:gosec // G118 misreads: ctx is the run's context, passed on
	go m.vouchLoop(ctx)
	m.guardLease(ctx, fence)
	m.shared.mu.Lock()
	m.shared.startUnbounded = false
	m.shared.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.shared.mu.Lock()
		m.shared.lastHeartbeat, m.shared.lastRenew, m.shared.syncRecorded = time.Time{}, time.Time{}, ""
		m.shared.mu.Unlock()
	})
	return true
}

// guardRun starts guardLease for the postgres run under way.
func (m *Manager) guardRun() {
	m.shared.mu.Lock()
	ctx, fence := m.shared.run, m.shared.runFence
	m.shared.mu.Unlock()
	if ctx != nil {
		m.guardLease(ctx, fence)
	}
}

// guardLease starts holdLease for the run of postgres that ctx is, once:
// from the start of a run as a primary (supervise), or at a promotion.
func (m *Manager) guardLease(ctx context.Context, fence chan<- error) {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	if m.lease == nil || (m.shared.status.Role != instanceapi.RolePrimary && !m.shared.promoting) || m.shared.guardedRun == ctx {
		return
	}
	m.shared.guardedRun = ctx //nolint:fatcontext // held to compare, not to pass down (see shared)
	go m.holdLease(ctx, fence, time.Now())
}

// heartbeat commits a WAL record three times per HeartbeatDeadline on its
// own connection, each with that deadline: a frozen server, a stalled disk or a full one stops it, and
// with it the lease renewal. It waits for the local flush only, so a
// missing synchronous standby does not look like a broken primary.
func (m *Manager) heartbeat(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(instanceapi.HeartbeatDeadline / 3)
	defer tick.Stop()
	for {
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, instanceapi.HeartbeatDeadline)
			conn, _ = pgx.Connect(cctx, m.localDSN())
			if conn != nil {
				if _, err := conn.Exec(cctx, "SET synchronous_commit = local"); err != nil {
					_ = conn.Close(context.Background())
					conn = nil
				}
			}
			cancel()
		}
		if conn != nil {
			hctx, cancel := context.WithTimeout(ctx, instanceapi.HeartbeatDeadline)
			_, err := conn.Exec(hctx, "SELECT pg_logical_emit_message(true, 'daytwo-heartbeat', now()::text)")
			cancel()
			if err == nil {
				m.shared.mu.Lock()
				m.shared.lastHeartbeat = time.Now()
				m.shared.mu.Unlock()
			} else {
				_ = conn.Close(context.Background())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// holdLease renews the primary lease while the heartbeat is fresh, and
// fences when the lease names another instance or when the last renewal
// known to this manager (m.shared.leaseUntil: its own, or the one learnRole or a
// promotion read) runs out, whatever renewed it: armed from the start of
// the run, not from its first renewal, so a run that never renews still
// fences in time. Until the server first runs (crash recovery, say) or
// while it promotes, within restartLeaseLimit of started, it extends the
// lease without a heartbeat (Lease.Extend, which records nothing): nothing
// writes yet, and a recovery longer than the lease must not be fenced over
// and over.
func (m *Manager) holdLease(ctx context.Context, fence chan<- error, started time.Time) {
	for {
		m.shared.mu.Lock()
		beat, lsn, sync := m.shared.lastHeartbeat, m.shared.status.LSN, m.shared.syncRecord
		starting := (m.shared.status.Phase != instanceapi.PhaseRunning || m.shared.promoting) &&
			(time.Since(started) < restartLeaseLimit || m.shared.startUnbounded)
		unserved := m.shared.status.Phase != instanceapi.PhaseRunning || m.shared.promoting
		m.shared.mu.Unlock()
		var err error
		switch {
		case time.Since(beat) < instanceapi.HeartbeatDeadline:
			err = m.renewBefore(ctx, m.serveDeadline(unserved), lsn, sync)
		case starting:
			err = m.extendBefore(ctx, renewLimit(m.serveDeadline(unserved)))
		}
		lost := errors.Is(err, ErrLeaseLost)
		deadline := m.serveDeadline(unserved)
		if !lost && time.Now().Before(deadline) {
			m.noteServingOnPromises()
			// The next renewal, or the fence, whichever is first: a tick
			// would fence up to a period late, which the margin cannot spare.
			if !sleepCtx(ctx, min(instanceapi.LeaseRenewPeriod, time.Until(deadline))) {
				return
			}
			continue
		}
		if !lost {
			err = fmt.Errorf("the primary lease ran out at %s, not renewed since (heartbeat %s ago), and no promises of its peers cover it",
				deadline.Add(instanceapi.LeaseFenceMargin).Format(time.StampMilli), time.Since(beat).Round(time.Millisecond))
			if unserved {
				m.shared.mu.Lock()
				m.shared.startFenced = true // learnRole lets failover have a term first
				m.shared.mu.Unlock()
			}
		}
		m.vouch.setServing(false)
		select {
		case fence <- err:
		case <-ctx.Done(): // the run ended: nothing left to fence
		}
		return
	}
}

// serveDeadline is when this primary must have stopped serving: the end of
// its term (m.shared.leaseUntil), or later while it serves and its peers'
// promises and its own heartbeat cover it (vouchers): then no other
// instance can be promoted, and a control-plane outage need not stop its
// writes.
func (m *Manager) serveDeadline(unserved bool) time.Time {
	m.shared.mu.Lock()
	until := m.shared.leaseUntil
	m.shared.mu.Unlock()
	if unserved {
		return until
	}
	if cover, ok := m.vouch.coveredUntil(time.Now()); ok {
		return later(until, cover)
	}
	return until
}

// noteServingOnPromises records (and logs, as it begins and ends) whether
// the primary serves past its term on promises now.
func (m *Manager) noteServingOnPromises() {
	m.shared.mu.Lock()
	past := !time.Now().Before(m.shared.leaseUntil)
	m.shared.mu.Unlock()
	if m.vouch.setServing(past) {
		if past {
			m.log.Info("Serving past the primary lease's term on the peers' promises: the lease cannot be renewed")
		} else {
			m.log.Info("The primary lease is renewed again")
		}
	}
}

// renewBefore renews the lease once for a serving primary, giving up at
// until (renewLimit), and records a success.
func (m *Manager) renewBefore(ctx context.Context, until time.Time, lsn, sync string) error {
	start := time.Now()
	if err := m.renew(ctx, renewLimit(until), lsn, sync); err != nil {
		return err
	}
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	m.shared.lastRenew, m.shared.lastRenewTerm, m.shared.syncRecorded = start, m.leaseTerm(), sync
	m.shared.leaseUntil = later(m.shared.leaseUntil, ha.ServeUntil(start, m.leaseTerm()))
	if ctx.Err() == nil {
		// A renewal that ends after its server was asked to stop (a
		// restart in place) must not end the restart's hold on readiness.
		m.shared.restarting = false
	}
	return nil
}

// renew renews the lease within limit, recording the vouchers
// (voucherList) and, once it did, serving on their promises past the term.
func (m *Manager) renew(ctx context.Context, limit time.Duration, lsn, sync string) error {
	list := m.voucherList()
	m.vouch.attempt(list)
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := m.lease.Renew(rctx, m.cfg.Pod, lsn, sync, list); err != nil {
		return err
	}
	m.vouch.recordedAs(list)
	return nil
}

// extendBefore extends the lease (Lease.Extend) for a server that does
// not serve yet: m.shared.leaseUntil moves on, but not the readiness a serving
// renewal gives (lastRenew).
func (m *Manager) extendBefore(ctx context.Context, limit time.Duration) error {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, limit)
	err := m.lease.Extend(rctx, m.cfg.Pod)
	cancel()
	if err != nil {
		return err
	}
	m.shared.mu.Lock()
	m.shared.leaseUntil = later(m.shared.leaseUntil, ha.ServeUntil(start, m.leaseTerm()))
	m.shared.mu.Unlock()
	return nil
}

// renewLimit bounds a renewal so that it ends by until, when the fence is
// due (a renewal period at most).
func renewLimit(until time.Time) time.Duration {
	return min(instanceapi.LeaseRenewPeriod, max(time.Until(until), 10*time.Millisecond))
}

// extendIfShort extends the lease right before postgres starts as a
// primary when less than a renewal period of its term is left: the work
// between learnRole and the start (a clone, an import, an upgrade) may
// have taken the rest. A failure is a fence: the run starts again from
// learnRole.
func (m *Manager) extendIfShort(ctx context.Context) error {
	m.shared.mu.Lock()
	short := m.lease != nil && m.shared.status.Role == instanceapi.RolePrimary && time.Until(m.shared.leaseUntil) < instanceapi.LeaseRenewPeriod
	m.shared.mu.Unlock()
	if !short {
		return nil
	}
	if err := m.extendBefore(ctx, instanceapi.LeaseRenewPeriod); err != nil {
		return fmt.Errorf("%w: the primary lease ran out before postgres started, and could not be extended: %w", errFenced, err)
	}
	return nil
}

// sleepCtx waits d, or less if ctx ends first; it reports whether it waited d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// leaseFresh: a primary under a lease serves (is ready) only while its last
// renewal is valid, so the -rw Service drops it as soon as it may not write.
func (m *Manager) leaseFresh() bool {
	if m.lease == nil {
		return true
	}
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	fresh := !m.shared.lastRenew.IsZero() && time.Now().Before(ha.ServeUntil(m.shared.lastRenew, m.shared.lastRenewTerm))
	// Past the term, the promises that let the guard serve on (its
	// heartbeat commits, or it fences within HeartbeatDeadline).
	return fresh || (!m.shared.lastRenew.IsZero() && m.vouch.covers(time.Now()))
}

// restartLeaseLimit bounds how long a primary restarting in place, as
// asked, renews its lease without a heartbeat: a server that does not come
// back by then lets the lease run out, and a failover follows.
const restartLeaseLimit = 30 * time.Second

// keepLeaseWhileRestarting renews the lease of a primary that stopped
// cleanly at lsn to start again in place, until its server runs again
// (the heartbeat and its renewals take over) or restartLeaseLimit passes.
// Nothing can write meanwhile, so the lease only keeps a failover from
// turning a planned restart of a second into a promotion.
func (m *Manager) keepLeaseWhileRestarting(ctx context.Context, lsn, sync string) {
	deadline := time.Now().Add(restartLeaseLimit)
	tick := time.NewTicker(instanceapi.LeaseRenewPeriod)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if m.Status().Phase == instanceapi.PhaseRunning {
			return
		}
		start := time.Now()
		err := m.renew(ctx, instanceapi.LeaseRenewPeriod, lsn, sync)
		if errors.Is(err, ErrLeaseLost) {
			return
		}
		if err == nil {
			m.shared.mu.Lock()
			m.shared.leaseUntil = later(m.shared.leaseUntil, ha.ServeUntil(start, m.leaseTerm()))
			m.shared.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// restartingInPlace: this primary's postgres crashed and its manager is
// starting it again, within the lease it still holds. It stays ready, so
// it stays the endpoint of -rw: there is no other primary to send writes
// to meanwhile (a connection is refused either way), and leaving the
// endpoints would add a failed probe, a passed one and kube-proxy's next
// sync, about 4 s, to a restart that takes about one.
func (m *Manager) restartingInPlace() bool {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	return m.shared.restarting && m.shared.status.Role == instanceapi.RolePrimary && time.Now().Before(m.shared.leaseUntil)
}

// releaseLease lets the lease expire at once after a clean shutdown, so a
// replica takes over without waiting for it to run out. It says whether
// it did.
func (m *Manager) releaseLease() bool {
	if m.lease == nil || m.role() != instanceapi.RolePrimary {
		return false
	}
	// A clean shutdown's checkpoint is the last WAL this primary wrote:
	// failover measures the replicas against it. After one that was not
	// clean there is none to give.
	lsn, _ := m.shutdownCheckpoint()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.lease.Release(ctx, m.cfg.Pod, lsn); err != nil {
		m.log.Error(err, "Failed to release the primary lease; a replica takes over once it expires")
		return false
	}
	m.log.Info("Released the primary lease", "lsn", lsn)
	return true
}
