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
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
		now.Before(ha.ServeUntil(v.Renewed, v.Duration))
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
	if m.fencedOnRequest() {
		return http.StatusConflict, errors.New("the instance is fenced on request (spec.fencedInstances)")
	}
	if by := m.supersededBy(); by != "" {
		return http.StatusConflict, fmt.Errorf("%s was promoted from this Database's WAL archive: none of its instances serves again", by)
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
	m.shared.mu.Lock()
	m.shared.holder = m.cfg.Pod
	m.shared.mu.Unlock()
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
	// A replica Database claims its source's archive: the source stops
	// serving once it sees the claim.
	if err := m.claimSource(ctx, v); err != nil {
		return http.StatusConflict, err
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
	renewed, term := checked, m.leaseTerm()
	if !v.Renewed.IsZero() && v.Renewed.Before(checked) {
		renewed = v.Renewed // its renewer's clock: the fence margin absorbs the skew
	}
	if v.Duration > 0 {
		// The term that renewal recorded (the operator's at a move, the
		// old holder's at a handover) is what expiry is judged by: never
		// count on more of it than that, whatever this instance's own.
		term = min(term, v.Duration)
	}
	if time.Until(ha.ServeUntil(renewed, v.Duration)) < instanceapi.LeaseRenewPeriod {
		// The term the move gave ran out, or nearly, while this replica
		// could not promote (cut from the API, say): another may be named
		// by now, or soon. It promotes only under a term of its own.
		start := time.Now()
		if err := m.extendBefore(ctx, instanceapi.LeaseRenewPeriod); err != nil {
			return http.StatusConflict, fmt.Errorf("the primary lease's term ran out and could not be extended: %w", err)
		}
		renewed, term = start, m.leaseTerm()
	}
	// Its own deadline: a cancelled promotion may still finish, and then
	// this instance must know it is a primary (and renew, or fence).
	pctx, pcancel := context.WithTimeout(context.Background(), promoteTimeout)
	defer pcancel()
	// The fence is armed before pg_promote, not after: replay may hold the
	// promotion for seconds, and the server serves the moment it ends.
	// While it promotes, the guard extends the term (nothing writes yet),
	// or fences at its end.
	m.shared.mu.Lock()
	m.shared.promoting = true
	m.shared.leaseUntil = later(m.shared.leaseUntil, ha.ServeUntil(renewed, term))
	m.shared.mu.Unlock()
	m.guardRun()
	signalled = true
	err = promoteNow(pctx, conn)
	m.shared.mu.Lock()
	m.shared.promoting = false
	m.shared.mu.Unlock()
	if err != nil {
		// A promotion signalled may still end: the guard, armed for this
		// run, fences it at the term's end unless it renews as a primary.
		return http.StatusInternalServerError, err
	}
	m.setRole(instanceapi.RolePrimary)
	m.shared.mu.Lock()
	// The lease runs from its last renewal (the operator's as it moved or
	// extended it, the old primary's as it handed it over, or the guard's
	// while it promoted), not from now: a promotion that waited long must
	// not count on more.
	m.shared.lastRenew, m.shared.lastRenewTerm, m.shared.lastHeartbeat = renewed, term, time.Now()
	m.shared.status.InRecovery, m.shared.status.Streaming = false, false
	m.shared.notStreamingSince, m.shared.streamed, m.shared.streamLost = time.Time{}, false, time.Time{}
	if m.shared.standbyWAL != nil {
		m.shared.standbyWAL.Clear() // a primary restores nothing
	}
	m.shared.mu.Unlock()
	// A replica's repair marks mean nothing to a primary, and a clone of
	// it must not inherit them.
	for _, mark := range []string{recloneMark, rewindMark} {
		if err := os.Remove(filepath.Join(m.cfg.PGData, mark)); err == nil {
			m.log.Info("Removed a replica's repair mark on promotion", "mark", mark)
		}
	}
	m.dropFloors()
	if m.source != nil {
		// The data is the source's: its roles carry the source's
		// passwords until this Database's own are set.
		m.ensureRolesAfterPromotion(conn)
	}
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
