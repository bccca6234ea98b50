package ha

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// The instance manager's lease duties, as internal/instance/primary.go and
// lease.go carry them out: the heartbeat, holdLease and renewBefore on a
// primary, the watch (holderIs) and promote on a replica.

// beat is the heartbeat commit, three times per HeartbeatDeadline.
func (n *simNode) beat(run int) {
	if n.run != run || !n.accepting() {
		return
	}
	n.heartbeat = n.clock()
	n.w.after(instanceapi.HeartbeatDeadline/3, func() { n.beat(run) })
}

// guardLease starts holdLease for run, once: a primary's, or the run a
// promotion is under way in.
func (n *simNode) guardLease(run int) {
	if n.role != string(instanceapi.RolePrimary) && !n.promoting || n.guarded == run {
		return
	}
	n.guarded = run
	n.holdLease(run, n.w.now)
}

// holdLease renews while the heartbeat is fresh, extends while the server
// is not Running yet or promotes (within restartLeaseLimit of the guard's
// start), and fences when the lease names another or its serveDeadline
// passes (leaseUntil, or later while its peers' promises and its own
// heartbeat cover it), waking for whichever comes first.
func (n *simNode) holdLease(run int, started time.Duration) {
	w := n.w
	if n.run != run {
		return
	}
	beat := n.heartbeat
	unserved := !n.running || n.promoting
	check := func(_, lost bool) {
		if n.run != run {
			return
		}
		deadline := n.serveDeadline(unserved)
		if lost || !n.clock().Before(deadline) && !w.cfg.noFence {
			why := "the lease ran out"
			switch {
			case lost:
				why = "the lease names another instance"
			case w.tracing:
				cover, _ := n.vouch.coveredUntil(n.clock())
				why = fmt.Sprintf("the lease ran out at %.2fs, and the promises and its heartbeat covered it until %s",
					trueTime(n.leaseUntil, n.skew).Seconds(), simAt(cover, n.skew))
			}
			n.fence(run, why)
			return
		}
		if past := !n.clock().Before(n.leaseUntil); past != n.onPromises {
			n.onPromises = past
			if past {
				w.logf("%s: serving past its lease's term on its peers' promises", n.name)
			}
		}
		if n.onPromises && n.accepting() {
			w.pastTerm++
		}
		wait := instanceapi.LeaseRenewPeriod
		if d := deadline.Sub(n.clock()); d > 0 {
			wait = min(wait, d)
		}
		w.after(wait, func() { n.holdLease(run, started) })
	}
	limit := renewLimit(n.serveDeadline(unserved), n.clock())
	switch {
	case !beat.IsZero() && n.clock().Sub(beat) < instanceapi.HeartbeatDeadline:
		n.renewBefore(run, limit, check)
	case unserved && w.now-started < 30*time.Second: // restartLeaseLimit
		n.extendBefore(run, limit, check)
	default:
		check(false, false)
	}
}

// renewLimit bounds a renewal so that it ends by until, when the fence is
// due (a renewal period at most).
func renewLimit(until, now time.Time) time.Duration {
	return min(instanceapi.LeaseRenewPeriod, max(until.Sub(now), 10*time.Millisecond))
}

// renewBefore is Renew, for a serving primary: renewTime, the WAL position
// observed, the synchronous setting and the vouchers recorded (renew: the
// demand widened first, set to the list once written).
func (n *simNode) renewBefore(run int, limit time.Duration, done func(ok, lost bool)) {
	lsn, sync, list := n.status.lsn, n.syncRecord, n.voucherList()
	n.vouch.attempt(list)
	n.writeLease(run, limit, func(l *coordinationv1.Lease) {
		if l.Spec.AcquireTime == nil {
			l.Spec.AcquireTime = l.Spec.RenewTime
		}
		if lsn != "" {
			l.Annotations[instanceapi.AnnotationLeaseLSN] = lsn
		}
		l.Annotations[instanceapi.AnnotationSync] = sync
		if list != nil {
			l.Annotations[instanceapi.AnnotationVouchers] = simVouchers(list)
		} else {
			delete(l.Annotations, instanceapi.AnnotationVouchers)
		}
		delete(l.Annotations, instanceapi.AnnotationHandoverLSN)
		delete(l.Annotations, instanceapi.AnnotationReleasedBy)
	}, n.counted(func(ok, lost bool) {
		if ok {
			n.vouch.recordedAs(list)
		}
		done(ok, lost)
	}))
}

// extendBefore is Extend for a server not serving yet: leaseUntil moves
// on, the lease records nothing new.
func (n *simNode) extendBefore(run int, limit time.Duration, done func(ok, lost bool)) {
	n.writeLease(run, limit, nil, n.counted(done))
}

// counted moves leaseUntil on from the start of a write that succeeded.
func (n *simNode) counted(done func(ok, lost bool)) func(ok, lost bool) {
	start := n.clock()
	return func(ok, lost bool) {
		if ok {
			n.leaseUntil = later(n.leaseUntil, ServeUntil(start, n.fenceTerm()))
		}
		done(ok, lost)
	}
}

// writeLease is KubeLease.renew, which Renew (record sets what it records)
// and Extend (record nil: renewTime only) share: a GET, then an UPDATE
// carrying its resourceVersion, renewTime from this clock, given up after
// limit. done hears whether it succeeded, with the run still under way
// (the real write's context ends with it), and whether the lease names
// another instance (ErrLeaseLost).
func (n *simNode) writeLease(run int, limit time.Duration, record func(*coordinationv1.Lease), done func(ok, lost bool)) {
	w := n.w
	deadline := w.now + limit
	apiCall(w, n.idx, limit, w.getLease, func(l *coordinationv1.Lease, ok bool) {
		if !ok || n.run != run || ptr.Deref(l.Spec.HolderIdentity, "") != n.name {
			done(false, ok && n.run == run)
			return
		}
		now := metav1.NewMicroTime(n.clock())
		l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, simSeconds(n.leaseTerm)
		if record != nil {
			record(l)
		}
		apiCall(w, n.idx, max(deadline-w.now, 0), func() bool { return w.updateLease(l) }, func(updated, ok bool) {
			done(ok && updated && n.run == run, false)
		})
	})
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// simLeaseView is instance.LeaseView.
type simLeaseView struct {
	holder      string
	renewed     time.Time
	duration    time.Duration
	transitions int32
	// releasedBy and handoverLSN are the lease's annotations.
	releasedBy, handoverLSN string
}

func simView(l *coordinationv1.Lease) simLeaseView {
	v := simLeaseView{holder: ptr.Deref(l.Spec.HolderIdentity, ""), transitions: ptr.Deref(l.Spec.LeaseTransitions, 0),
		releasedBy: l.Annotations[instanceapi.AnnotationReleasedBy], handoverLSN: l.Annotations[instanceapi.AnnotationHandoverLSN]}
	if l.Spec.RenewTime != nil {
		v.renewed = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		v.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return v
}

func (v simLeaseView) validUntil() time.Time {
	if v.duration <= 0 {
		return time.Time{}
	}
	return ServeUntil(v.renewed, v.duration)
}

// stillNamed is instance.stillNamed.
func (v simLeaseView) stillNamed(read, now time.Time) bool {
	return !v.renewed.IsZero() && v.duration > 0 && now.Sub(read) <= 500*time.Millisecond &&
		now.Before(ServeUntil(v.renewed, v.duration))
}

// watch is the manager's informer on the lease: it sees the latest version
// a moment after it changed, while the API answers (holderIs).
func (n *simNode) watch() {
	w := n.w
	lag := n.lag
	if w.cfg.healthy {
		lag = min(lag, 30*time.Millisecond)
	}
	if n.seenRV == w.rv || !n.managerUp || !w.up(n.idx, epAPI) || w.now < w.leaseAt+lag {
		return
	}
	// An informer's first event lists the lease: it moved nothing.
	holder, transitions := ptr.Deref(w.lease.Spec.HolderIdentity, ""), ptr.Deref(w.lease.Spec.LeaseTransitions, 0)
	moved := n.seenRV > 0 && transitions > n.seenTransitions
	n.seenRV, n.seenTransitions = w.rv, transitions
	n.apiWatch.seen = n.clock()
	n.holderIs(holder, moved)
}

// holderIs acts on the lease naming holder, as watched or as read: a
// replica streams from it, or promotes itself when the lease was handed
// on to it.
func (n *simNode) holderIs(holder string, moved bool) {
	changed := holder != n.holder
	n.holder = holder
	if changed {
		n.promise.forgetVouched(holder)
	}
	if !changed || !n.replica() {
		return
	}
	if holder == n.name {
		if moved && n.running {
			n.promote(func(bool) {})
		}
		return
	}
	n.upstream = simIndex(holder) // the conf rewritten and reloaded
}

// promote is the instance's promote: the lease must name this replica,
// read once more unless the first read still counts; the promoted server
// serves until ServeUntil(the lease's renewTime) on this clock. done gets
// whether it is a primary.
func (n *simNode) promote(done func(bool)) {
	w := n.w
	if n.promoteMu != 0 {
		n.waiters = append(n.waiters, done)
		return
	}
	primary := !n.replica()
	if n.pg != pgUp || !n.running {
		done(false)
		return
	}
	n.promotions++
	n.promoteMu = n.promotions
	run, gen := n.run, n.promotions
	finish := func(ok bool) {
		done(ok)
		if n.promoteMu == gen {
			// The calls that waited run now, one at a time.
			n.promoteMu = 0
			waiting := n.waiters
			n.waiters = nil
			for _, f := range waiting {
				n.promote(f)
			}
		}
	}
	view := func(then func(simLeaseView, bool)) {
		apiCall(w, n.idx, 2*time.Second, w.getLease, func(l *coordinationv1.Lease, ok bool) {
			if n.run != run || !ok {
				then(simLeaseView{}, false)
				return
			}
			v := simView(l)
			then(v, v.holder == n.name)
		})
	}
	view(func(v simLeaseView, named bool) {
		if !named || primary {
			finish(named && primary)
			return
		}
		// A promise to the last holder binds until it ends, unless that
		// holder gave the lease up; past this, no more promises.
		if !n.promise.claim(n.name, v.releasedBy, v.handoverLSN != "", n.clock(), w.cfg.ignorePromise) {
			w.logf("%s: not promoted: promised %s until %.2fs", n.name, n.promise.holder, trueTime(n.promise.until, n.skew).Seconds())
			finish(false) // 409
			return
		}
		// Until pg_promote is signalled this stays a replica, free to
		// promise again if the promotion goes no further (the manager's
		// own deferred reopen: none once it restarted).
		signalled, manager, claimed := new(bool), n.managers, finish
		finish := func(ok bool) {
			if !*signalled && n.managers == manager {
				n.promise.reopen()
			}
			claimed(ok)
		}
		read := n.clock()
		n.holder = n.name
		w.after(w.between(20*time.Millisecond, 200*time.Millisecond), func() { // connect, peers' slots
			if n.run != run {
				finish(false)
				return
			}
			checked := n.clock()
			if v.stillNamed(read, checked) {
				n.promoteNow(run, v, checked, signalled, finish)
				return
			}
			view(func(v simLeaseView, named bool) {
				if !named {
					if v.holder != "" {
						n.holderIs(v.holder, false) // follow the new one now
					}
					finish(false)
					return
				}
				n.promoteNow(run, v, checked, signalled, finish)
			})
		})
	})
}

// promoteNow: the term from the renewal the lease records, or, when that
// ran out or nearly (a replica that could not promote for a while), from
// an extension of its own, refused if Extend fails; then pgPromote.
func (n *simNode) promoteNow(run int, v simLeaseView, checked time.Time, signalled *bool, finish func(bool)) {
	renewed := checked
	if !v.renewed.IsZero() && v.renewed.Before(checked) {
		renewed = v.renewed
	}
	if ServeUntil(renewed, v.duration).Sub(n.clock()) >= instanceapi.LeaseRenewPeriod {
		// The term that renewal recorded bounds what this one counts on
		// (instance.Manager.promote).
		term := n.fenceTerm()
		if v.duration > 0 {
			term = min(term, v.duration)
		}
		n.pgPromote(run, v.transitions, renewed, term, signalled, finish)
		return
	}
	start := n.clock()
	n.writeLease(run, instanceapi.LeaseRenewPeriod, nil, func(ok, _ bool) {
		if !ok {
			n.w.logf("%s: not promoted: the term ran out and could not be extended", n.name)
			finish(false) // 409
			return
		}
		n.w.logf("%s: the term ran out; extended it to promote", n.name)
		n.pgPromote(run, v.transitions, start, n.fenceTerm(), signalled, finish)
	})
}

// pgPromote is pg_promote under the lease guard, armed for the run before
// the signal with the term counted from renewed: while a backlog is
// replayed it extends the term, or fences at its end. Once the server
// left recovery, the manager records a primary, its term kept. When the
// run ends first, promoteNow polls a closed connection until its deadline
// (promoteTimeout), promoting meanwhile, unless the manager restarted.
func (n *simNode) pgPromote(run int, term int32, renewed time.Time, leaseTerm time.Duration, signalled *bool, finish func(bool)) {
	w := n.w
	d := w.between(20*time.Millisecond, 300*time.Millisecond)
	if w.chance(0.05) {
		// Replay of a backlog first: standby query conflicts hold replay
		// back for up to max_standby_streaming_delay (30 s by default).
		d = w.between(time.Second, 10*time.Second)
		w.logf("%s: pg_promote: replay holds the promotion for %.2fs", n.name, d.Seconds())
	}
	n.promoting = true
	n.leaseUntil = later(n.leaseUntil, ServeUntil(renewed, leaseTerm))
	n.guardLease(run)
	*signalled = true
	deadline, manager := w.now+30*time.Second, n.managers
	var failed func()
	failed = func() {
		switch {
		case n.managers != manager:
			finish(false)
		case w.now >= deadline:
			n.promoting = false
			finish(false)
		default:
			w.after(100*time.Millisecond, failed)
		}
	}
	w.after(d, func() {
		if n.run != run {
			failed()
			return
		}
		w.timelines++
		n.timeline = w.timelines
		n.wal = append(n.wal, simEntry{id: -n.timeline, at: w.now})
		n.promoting = false
		n.role, n.upstream, n.term = string(instanceapi.RolePrimary), -1, term
		n.heartbeat = n.clock()
		n.servingFrom(run)
		finish(true)
	})
}
