package instance

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// learnRole asks the primary lease who the primary is, waiting while the
// Kubernetes API does not answer: an instance that does not know its role
// must not start postgres at all.
func (m *Manager) learnRole(ctx context.Context) error {
	if m.lease == nil {
		return nil
	}
	for {
		v, err := m.lease.View(ctx)
		holder := v.Holder
		if err == nil && holder != "" {
			role := instanceapi.RoleReplica
			if holder == m.cfg.Pod {
				role = instanceapi.RolePrimary
			}
			m.setRole(role)
			m.mu.Lock()
			m.holder = holder
			m.mu.Unlock()
			if role == instanceapi.RolePrimary && !m.mayStartAsPrimary(ctx, v) {
				if !sleepCtx(ctx, time.Second) {
					return ctx.Err()
				}
				continue
			}
			m.log.Info("Role from the primary lease", "role", role, "holder", holder)
			return nil
		}
		msg := "waiting for the primary lease to name a holder"
		if err != nil {
			msg = "waiting for the Kubernetes API to read the primary lease: " + err.Error()
		}
		m.setMessage(msg)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// mayStartAsPrimary says whether postgres may start as the primary the
// lease view v names, extending the lease first when less than a renewal
// period of its term is left; when not, it says why (setMessage), and
// learnRole reads the lease again. The term counts from the last renewal,
// whoever made it, not from this read. After a start that ran out of
// restartLeaseLimit before it served (a long crash recovery or replay),
// the lease lapses for a whole term first, so failover may promote
// another; only if none is promoted does this instance start again, then
// with no limit (killing a recovery only starts it over).
func (m *Manager) mayStartAsPrimary(ctx context.Context, v LeaseView) bool {
	m.mu.Lock()
	m.leaseUntil = later(m.leaseUntil, v.validUntil())
	until := m.leaseUntil
	forFailover := m.startFenced && time.Now().Before(until.Add(instanceapi.LeaseFenceMargin+instanceapi.LeaseDuration))
	if m.startFenced && !forFailover {
		m.startFenced, m.startUnbounded = false, true
	}
	m.mu.Unlock()
	if forFailover {
		m.setMessage("the last start took too long; waiting a lease term for failover before starting again")
		return false
	}
	if err := m.promise.claim(m.cfg.Pod, v.ReleasedBy, v.HandoverLSN != "", time.Now()); err != nil {
		m.setMessage("waiting to start as the primary: " + err.Error())
		return false
	}
	if time.Until(until) >= instanceapi.LeaseRenewPeriod {
		return true
	}
	if err := m.extendBefore(ctx, instanceapi.LeaseRenewPeriod); err != nil {
		m.setMessage("waiting for the Kubernetes API to extend the primary lease: " + err.Error())
		return false
	}
	return true
}

// rejoin turns data that last ran as a primary into a replica of the
// current primary: pg_rewind undoes what it wrote after the two diverged,
// and when that fails the replica is cloned again. Data that already ran as
// a replica follows the new timeline by itself, unless it replayed past the
// fork (rewindMark, see errDiverged).
func (m *Manager) rejoin(ctx context.Context) error {
	if m.role() != instanceapi.RoleReplica || m.bootstrapped {
		return nil
	}
	if _, err := os.Stat(filepath.Join(m.cfg.PGData, "standby.signal")); err == nil && !m.marked(rewindMark) {
		return nil
	}
	if err := m.cfg.writePassFile(); err != nil {
		return err
	}
	host, port := m.upstream()
	m.setMessage("rewinding the data to follow " + host)
	source := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres passfile=%s connect_timeout=5",
		host, port, replicationUser, m.cfg.passFile()) + m.cfg.sslParams()
	// Without a checkpoint a just-promoted source still shows the old
	// timeline in its control file, and pg_rewind would find nothing to
	// undo. Until the primary answers, wait, as a clone would.
	for {
		err := checkpoint(ctx, source, true)
		if err == nil {
			break
		}
		m.setMessage("waiting for the primary " + host + " to rewind: " + err.Error())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	if err := os.WriteFile(m.cfg.rewinding(), []byte("pg_rewind started\n"), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", m.cfg.rewinding(), err)
	}
	rewind := exec.CommandContext(ctx, m.cfg.bin("pg_rewind"), "--target-pgdata="+m.cfg.PGData, "--source-server="+source)
	rewind.Env = append(os.Environ(), m.cfg.sslEnv()...)
	out, err := rewind.CombinedOutput()
	if err == nil {
		m.log.Info("Rewound the data to follow the primary", "output", postgres.LastLines(out, 2))
		if err := os.Remove(m.cfg.rewinding()); err != nil {
			return fmt.Errorf("failed to remove %s: %w", m.cfg.rewinding(), err)
		}
		if err := os.Remove(filepath.Join(m.cfg.PGData, rewindMark)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("failed to remove %s: %w", rewindMark, err)
		}
		return nil
	}
	m.log.Info("Cloning the primary again: pg_rewind could not rejoin this data", "output", postgres.LastLines(out, 2))
	return m.bootstrap(ctx)
}

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
	m.mu.Lock()
	m.startUnbounded = false
	m.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.lastHeartbeat, m.lastRenew, m.syncRecorded = time.Time{}, time.Time{}, ""
		m.mu.Unlock()
	})
	return true
}

// guardRun starts guardLease for the postgres run under way.
func (m *Manager) guardRun() {
	m.mu.Lock()
	ctx, fence := m.run, m.runFence
	m.mu.Unlock()
	if ctx != nil {
		m.guardLease(ctx, fence)
	}
}

// guardLease starts holdLease for the run of postgres that ctx is, once:
// from the start of a run as a primary (supervise), or at a promotion.
func (m *Manager) guardLease(ctx context.Context, fence chan<- error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil || (m.status.Role != instanceapi.RolePrimary && !m.promoting) || m.guardedRun == ctx {
		return
	}
	m.guardedRun = ctx
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
				m.mu.Lock()
				m.lastHeartbeat = time.Now()
				m.mu.Unlock()
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
// known to this manager (m.leaseUntil: its own, or the one learnRole or a
// promotion read) runs out, whatever renewed it: armed from the start of
// the run, not from its first renewal, so a run that never renews still
// fences in time. Until the server first runs (crash recovery, say) or
// while it promotes, within restartLeaseLimit of started, it extends the
// lease without a heartbeat (Lease.Extend, which records nothing): nothing
// writes yet, and a recovery longer than the lease must not be fenced over
// and over.
func (m *Manager) holdLease(ctx context.Context, fence chan<- error, started time.Time) {
	for {
		m.mu.Lock()
		beat, lsn, sync := m.lastHeartbeat, m.status.LSN, m.syncRecord
		starting := (m.status.Phase != instanceapi.PhaseRunning || m.promoting) &&
			(time.Since(started) < restartLeaseLimit || m.startUnbounded)
		unserved := m.status.Phase != instanceapi.PhaseRunning || m.promoting
		m.mu.Unlock()
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
				m.mu.Lock()
				m.startFenced = true // learnRole lets failover have a term first
				m.mu.Unlock()
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
// its term (m.leaseUntil), or later while it serves and its peers'
// promises and its own heartbeat cover it (vouchers): then no other
// instance can be promoted, and a control-plane outage need not stop its
// writes.
func (m *Manager) serveDeadline(unserved bool) time.Time {
	m.mu.Lock()
	until := m.leaseUntil
	m.mu.Unlock()
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
	m.mu.Lock()
	past := !time.Now().Before(m.leaseUntil)
	m.mu.Unlock()
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
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastRenew, m.syncRecorded = start, sync
	m.leaseUntil = later(m.leaseUntil, ha.ServeUntil(start, 0))
	if ctx.Err() == nil {
		// A renewal that ends after its server was asked to stop (a
		// restart in place) must not end the restart's hold on readiness.
		m.restarting = false
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
// not serve yet: m.leaseUntil moves on, but not the readiness a serving
// renewal gives (lastRenew).
func (m *Manager) extendBefore(ctx context.Context, limit time.Duration) error {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, limit)
	err := m.lease.Extend(rctx, m.cfg.Pod)
	cancel()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.leaseUntil = later(m.leaseUntil, ha.ServeUntil(start, 0))
	m.mu.Unlock()
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
	m.mu.Lock()
	short := m.lease != nil && m.status.Role == instanceapi.RolePrimary && time.Until(m.leaseUntil) < instanceapi.LeaseRenewPeriod
	m.mu.Unlock()
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
	m.mu.Lock()
	defer m.mu.Unlock()
	fresh := !m.lastRenew.IsZero() && time.Since(m.lastRenew) < instanceapi.LeaseDuration-instanceapi.LeaseFenceMargin
	// Past the term, the promises that let the guard serve on (its
	// heartbeat commits, or it fences within HeartbeatDeadline).
	return fresh || (!m.lastRenew.IsZero() && m.vouch.covers(time.Now()))
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
			m.mu.Lock()
			m.leaseUntil = later(m.leaseUntil, ha.ServeUntil(start, 0))
			m.mu.Unlock()
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
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarting && m.status.Role == instanceapi.RolePrimary && time.Now().Before(m.leaseUntil)
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

// handlePromote promotes this replica once the caller proved it is the
// operator and the lease names this instance.
func (m *Manager) handlePromote(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.PromoteRequest
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req) // the body is optional
	code, err := m.promote(r.Context(), req.WaitLSN, "asked by the operator")
	if err != nil {
		writeJSON(w, code, instanceapi.Error{Message: err.Error()})
		return
	}
	writeJSON(w, code, m.Status())
}

// promoteNamed promotes this replica on the lease's word: the lease was
// handed on to it, moved by the operator's failover or handed over by a
// primary that stepped down, and the operator's promote call that follows
// finds it promoted already. A promotion that cannot go ahead yet (the
// instance is restarting, say) is left to that call, which the operator
// retries.
func (m *Manager) promoteNamed(ctx context.Context) {
	if code, err := m.promote(ctx, "", "named by the primary lease"); err != nil {
		m.log.Info("Named by the primary lease but not promoted; the operator's promote call retries", "status", code, "reason", err.Error())
	}
}

// promotionWait bounds how long a rejoin waits for its source's promotion
// before it checkpoints it all the same.
const promotionWait = 5 * time.Second

// promoteTimeout bounds a promotion, its wait for a handover's WAL included.
const promoteTimeout = 30 * time.Second

// reread is how old promote's lease read may be and still count, when it
// waited for no WAL: far below any lease's term.
const reread = 500 * time.Millisecond

// stillNamed: a lease read at read that named this instance still does at
// now, with no need to read it again. Only an expired lease is moved, so
// one read under reread ago, renewed and well within its term, has not
// been. A promotion that waited for WAL (seconds, perhaps) reads it again
// whatever this says; a failover's waits for nothing and saves the read,
// 0.1 to 0.25 s on a loaded node.
func stillNamed(v LeaseView, read, now time.Time) bool {
	return !v.Renewed.IsZero() && v.Duration > 0 && now.Sub(read) <= reread &&
		now.Before(v.Renewed.Add(min(v.Duration, instanceapi.LeaseDuration)-instanceapi.LeaseFenceMargin))
}

// promote promotes this replica, which the lease must name, once it has
// received waitLSN and the WAL the lease's handover names (a switchover's;
// none after a failover), and answers with an HTTP status. A primary the
// lease names is promoted already: the operator's call after the instance
// promoted itself on the lease's word succeeds at once. how says who
// asked, for the log.
func (m *Manager) promote(ctx context.Context, waitLSN, how string) (int, error) {
	// One at a time: the lease's naming and the operator's call race.
	m.promoteMu.Lock()
	defer m.promoteMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, promoteTimeout)
	defer cancel()
	// view reads the lease afresh: whether it names this instance, what
	// its handover asks, and when it was last renewed.
	view := func() (LeaseView, bool) {
		if m.lease == nil {
			return LeaseView{Holder: m.cfg.Pod}, true
		}
		v, err := m.lease.View(ctx)
		return v, err == nil && v.Holder == m.cfg.Pod
	}
	s := m.Status()
	if s.Role == instanceapi.RolePrimary && s.Phase == instanceapi.PhaseRunning && m.lease != nil {
		if _, named := view(); named {
			return http.StatusOK, nil
		}
	}
	if s.Role != instanceapi.RoleReplica || s.Phase != instanceapi.PhaseRunning {
		return http.StatusConflict, fmt.Errorf("instance is a %s in phase %s", s.Role, s.Phase)
	}
	v, named := view()
	if !named {
		return http.StatusConflict, errors.New("the primary lease does not name this instance")
	}
	// A promise to the last holder binds until it ends, unless that holder
	// gave the lease up; once past this, this instance promises no more.
	if err := m.promise.claim(m.cfg.Pod, v.ReleasedBy, v.HandoverLSN != "" || waitLSN != "", time.Now()); err != nil {
		return http.StatusConflict, err
	}
	// Until pg_promote is signalled this stays a replica, free to promise
	// again if the promotion goes no further.
	signalled := false
	defer func() {
		if !signalled {
			m.promise.reopen()
		}
	}()
	read := time.Now()
	conn, err := pgx.Connect(ctx, m.localDSN())
	if err != nil {
		return http.StatusServiceUnavailable, errors.New("postgres does not answer")
	}
	defer func() { _ = conn.Close(context.Background()) }()
	m.mu.Lock()
	m.holder = m.cfg.Pod
	m.mu.Unlock()
	// The peers' slots first: they stream from this instance as soon as
	// the lease names it, and keep streaming across the promotion.
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	m.createPeerSlots(sctx, conn)
	scancel()
	// The lease's own handover counts, not only the caller's: a caller's
	// (or a watch's) may be an older handover's.
	waited := false
	for _, lsn := range []string{waitLSN, v.HandoverLSN} {
		if lsn != "" {
			waited = true
			if err := waitReceived(ctx, conn, lsn); err != nil {
				return http.StatusConflict, err
			}
		}
	}
	// Once more just before the promotion, unless the first read still counts.
	checked := time.Now()
	if waited || !stillNamed(v, read, checked) {
		if v, named = view(); !named {
			if v.Holder != "" {
				// This promotion named itself the holder above, over a
				// watch event for the new one, perhaps: follow the new
				// one now (the event, if still to come, finds it done).
				m.holderIs(ctx, v.Holder, false)
			}
			return http.StatusConflict, errors.New("the primary lease moved to another instance while this one waited to promote")
		}
	}
	renewed := checked
	if !v.Renewed.IsZero() && v.Renewed.Before(checked) {
		renewed = v.Renewed // its renewer's clock: the fence margin absorbs the skew
	}
	if time.Until(ha.ServeUntil(renewed, v.Duration)) < instanceapi.LeaseRenewPeriod {
		// The term the move gave ran out, or nearly, while this replica
		// could not promote (cut from the API, say): another may be named
		// by now, or soon. It promotes only under a term of its own.
		start := time.Now()
		if err := m.extendBefore(ctx, instanceapi.LeaseRenewPeriod); err != nil {
			return http.StatusConflict, fmt.Errorf("the primary lease's term ran out and could not be extended: %w", err)
		}
		renewed = start
	}
	// Its own deadline: a cancelled promotion may still finish, and then
	// this instance must know it is a primary (and renew, or fence).
	pctx, pcancel := context.WithTimeout(context.Background(), promoteTimeout)
	defer pcancel()
	// The fence is armed before pg_promote, not after: replay may hold the
	// promotion for seconds, and the server serves the moment it ends.
	// While it promotes, the guard extends the term (nothing writes yet),
	// or fences at its end.
	m.mu.Lock()
	m.promoting = true
	m.leaseUntil = later(m.leaseUntil, ha.ServeUntil(renewed, 0))
	m.mu.Unlock()
	m.guardRun()
	signalled = true
	err = promoteNow(pctx, conn)
	m.mu.Lock()
	m.promoting = false
	m.mu.Unlock()
	if err != nil {
		// A promotion signalled may still end: the guard, armed for this
		// run, fences it at the term's end unless it renews as a primary.
		return http.StatusInternalServerError, err
	}
	m.setRole(instanceapi.RolePrimary)
	m.mu.Lock()
	// The lease runs from its last renewal (the operator's as it moved or
	// extended it, the old primary's as it handed it over, or the guard's
	// while it promoted), not from now: a promotion that waited long must
	// not count on more.
	m.lastRenew, m.lastHeartbeat = renewed, time.Now()
	m.status.InRecovery, m.status.Streaming = false, false
	m.notStreamingSince, m.streamed, m.streamLost = time.Time{}, false, time.Time{}
	if m.standbyWAL != nil {
		m.standbyWAL.Clear() // a primary restores nothing
	}
	m.mu.Unlock()
	// A replica's repair marks mean nothing to a primary, and a clone of
	// it must not inherit them.
	for _, mark := range []string{recloneMark, rewindMark} {
		if err := os.Remove(filepath.Join(m.cfg.PGData, mark)); err == nil {
			m.log.Info("Removed a replica's repair mark on promotion", "mark", mark)
		}
	}
	m.dropFloors()
	m.log.Info("Promoted to primary", "how", how)
	return http.StatusOK, nil
}

// authorized compares the bearer token with the api-token secret file in
// constant time. Without a token file nothing is authorized.
func (m *Manager) authorized(r *http.Request) bool {
	want, err := m.cfg.secret(instanceapi.SecretAPIToken)
	if err != nil || want == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get(instanceapi.AuthorizationHeader), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// checkpoint runs CHECKPOINT on the server dsn names. With promoted it
// first waits a moment (promotionWait at most) for that server to leave
// recovery: a rejoin's source may be promoting still, and a CHECKPOINT
// then is a restartpoint, which holds up the promotion (0.2 s on this
// machine, seen in the logs). Past that it checkpoints all the same, as
// before: a source that never promotes (a switchover's target that lacks
// the old primary's WAL) must not keep this instance out of failover's
// choice, which weighs only instances that run.
func checkpoint(ctx context.Context, dsn string, promoted bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("failed to connect to the primary: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for deadline := time.Now().Add(promotionWait); promoted && time.Now().Before(deadline); {
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			return fmt.Errorf("failed to ask the primary whether it is promoted: %w", err)
		}
		if !inRecovery {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("failed to checkpoint the primary: %w", err)
	}
	return nil
}

// promoteNow signals the promotion and waits until the server leaves
// recovery, checking every 10 ms: pg_promote's own wait checks every
// 100 ms, which a switchover's write pause would pay for.
func promoteNow(ctx context.Context, conn *pgx.Conn) error {
	var signalled bool
	// A server already out of recovery refuses the signal, and is promoted.
	signalErr := conn.QueryRow(ctx, "SELECT pg_promote(false)").Scan(&signalled)
	for {
		var inRecovery bool
		err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
		switch {
		case err == nil && !inRecovery:
			return nil
		case signalErr != nil:
			return fmt.Errorf("pg_promote did not signal the promotion: %w", signalErr)
		case !signalled:
			return errors.New("pg_promote did not signal the promotion")
		case err != nil && conn.IsClosed():
			// The server went away (a crash, a fence): waiting out the
			// deadline would hold the operator's promote call, and with it
			// failover, for nothing.
			return fmt.Errorf("the server went away while it promoted: %w", err)
		}
		select {
		case <-ctx.Done():
			return errors.New("the promotion did not finish in time")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
