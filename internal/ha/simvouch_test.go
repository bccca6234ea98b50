package ha

import (
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Serving through a control-plane outage, as internal/instance/vouch.go
// carries it out (instanceapi.VouchPeriod has the rule): a replica's
// promise not to be promoted (simPromise, handleVouch), and the holder's
// record of the promises it holds (simVouch, vouchLoop, askPromises).
// Messages between instances draw their latencies from the world's second
// source (vrng), so a schedule's other draws stay what they were before
// promises existed.

// simPromise is instance.promise: recorded on the volume (file) before it
// is given, so a container restart keeps it (load); closed once the
// instance claims to become a primary, until it runs as a replica again.
type simPromise struct {
	holder string
	until  time.Time // on this instance's clock
	closed bool
	lsn    string // the WAL position holder gave with its last ask
	// the promise file: what the next run of the manager loads
	fileHolder string
	fileUntil  time.Time
}

// load is what a new manager reads from the volume: the last promise, its
// time a wall clock's, so MaxClockSkew is added (here the same node's).
func (p *simPromise) load() {
	*p = simPromise{fileHolder: p.fileHolder, fileUntil: p.fileUntil}
	if p.fileHolder != "" {
		p.holder, p.until = p.fileHolder, p.fileUntil.Add(instanceapi.MaxClockSkew)
	}
}

// give promises holder, at WAL position lsn, recording it first; false
// once closed.
func (p *simPromise) give(holder, lsn string, now time.Time) bool {
	if p.closed {
		return false
	}
	until := now.Add(instanceapi.PromiseDuration)
	p.fileHolder, p.fileUntil = holder, until
	p.holder, p.until, p.lsn = holder, until, lsn
	return true
}

// forgetVouched drops the WAL position a holder gave, when the lease
// names another.
func (p *simPromise) forgetVouched(holder string) {
	if p.holder != holder {
		p.lsn = ""
	}
}

func (p *simPromise) active(now time.Time) (string, bool) {
	return p.holder, p.holder != "" && now.Before(p.until)
}

// claim closes the promise as this instance becomes a primary, unless a
// promise to another holder that did not give the lease up still binds:
// released names the holder that released it ("" none), handedOver says a
// switchover's handover is under way. With ignore (the mutation
// ignorePromise) a promise never binds.
func (p *simPromise) claim(self, released string, handedOver bool, now time.Time, ignore bool) bool {
	if !ignore && p.holder != "" && p.holder != self && p.holder != released && !handedOver && now.Before(p.until) {
		return false
	}
	p.closed = true
	return true
}

func (p *simPromise) reopen() { p.closed = false }

// simVouch is instance.vouchers, the holder's side: the demand its last
// renewal recorded on the lease, and until when each promise covers it,
// on its own clock.
type simVouch struct {
	recorded bool
	demand   []string
	cover    map[string]time.Time
	// alive is how long the holder's own heartbeat covers it, as a
	// promise would (counted each time vouchLoop asks).
	alive time.Time
}

func (v *simVouch) attempt(list []string) {
	if list == nil {
		v.recorded, v.demand = false, nil // the write deletes the record
	} else if v.recorded {
		v.demand = simUnion(v.demand, list)
	}
}

func (v *simVouch) recordedAs(list []string) { v.recorded, v.demand = list != nil, list }

func (v *simVouch) reset() { *v = simVouch{} }

// beat counts the holder's own heartbeat, fresh at asked, like a promise.
func (v *simVouch) beat(asked time.Time) {
	v.alive = later(v.alive, asked.Add(instanceapi.PromiseDuration-instanceapi.LeaseFenceMargin))
}

// promised counts pod's promise until covered (asked plus PromiseDuration
// less LeaseFenceMargin; the mutation countFromAnswer counts it from the
// answer's arrival, PromiseDuration whole).
func (v *simVouch) promised(pod string, until time.Time) {
	if v.cover == nil {
		v.cover = map[string]time.Time{}
	}
	v.cover[pod] = later(v.cover[pod], until)
}

// coveredUntil is the earliest cover of the demand and of the holder's
// own heartbeat, and whether it covers now.
func (v *simVouch) coveredUntil(now time.Time) (time.Time, bool) {
	if !v.recorded {
		return time.Time{}, false
	}
	until := v.alive
	for _, pod := range v.demand {
		if c := v.cover[pod]; c.Before(until) {
			until = c
		}
	}
	return until, now.Before(until)
}

func (v *simVouch) targets(list []string) []string { return simUnion(v.demand, list) }

func simUnion(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// voucherList is Manager.voucherList: every other instance the operator's
// replication list names (here always all of them, sorted).
func (n *simNode) voucherList() []string {
	list := []string{}
	for i := range simNodes {
		if i != n.idx {
			list = append(list, simName(i))
		}
	}
	return list
}

func simVouchers(list []string) string { return strings.Join(list, ",") }

// serveDeadline is Manager.serveDeadline: the end of the term, or later
// while the server serves and the promises and its heartbeat cover it.
func (n *simNode) serveDeadline(unserved bool) time.Time {
	until := n.leaseUntil
	if unserved {
		return until
	}
	if cover, ok := n.vouch.coveredUntil(n.clock()); ok {
		return later(until, cover)
	}
	return until
}

// vouchLoop counts the heartbeat and asks for promises each VouchPeriod
// while the heartbeat commits, for the run of postgres as a primary that
// run is (started with the heartbeat, startPrimaryDuties).
func (n *simNode) vouchLoop(run int) {
	if n.run != run {
		return
	}
	if asked := n.clock(); !n.heartbeat.IsZero() && asked.Sub(n.heartbeat) < instanceapi.HeartbeatDeadline && !n.w.cfg.noPromises {
		n.vouch.beat(asked)
		n.askPromises(run)
	}
	n.w.after(instanceapi.VouchPeriod, func() { n.vouchLoop(run) })
}

// peerLatency is one way between two instance managers' APIs: mostly
// milliseconds, now and then past the ask's timeout.
func (w *simWorld) peerLatency() time.Duration {
	if w.vrng.Float64() < 0.01 && !w.cfg.healthy {
		return w.vbetween(100*time.Millisecond, 1500*time.Millisecond)
	}
	return w.vbetween(time.Millisecond, 10*time.Millisecond)
}

// askPromises asks every target at once, each ask given up after
// VouchPeriod; a promise counts from when it was asked.
func (n *simNode) askPromises(run int) {
	w := n.w
	lsn := n.status.lsn // Status().LSN: the last observation's
	for _, pod := range n.vouch.targets(n.voucherList()) {
		i := simIndex(pod)
		asked, sent := n.clock(), w.now
		if !w.up(n.idx, i) {
			continue // no connection: the ask fails
		}
		w.after(w.peerLatency(), func() {
			r := w.nodes[i]
			if !w.up(n.idx, i) || !r.managerUp {
				return
			}
			r.handleVouch(n.name, lsn, func(ok bool) {
				w.after(w.peerLatency(), func() {
					if !ok || n.run != run || !w.up(n.idx, i) || w.now-sent > instanceapi.VouchPeriod {
						if n.run == run && n.onPromises {
							w.logf("%s: no promise from %s (asked at %.2fs)", n.name, pod, sent.Seconds())
						}
						return
					}
					until := asked.Add(instanceapi.PromiseDuration - instanceapi.LeaseFenceMargin)
					if w.cfg.countFromAnswer {
						until = n.clock().Add(instanceapi.PromiseDuration)
					}
					n.vouch.promised(pod, until)
				})
			})
		})
	}
}

// handleVouch is Manager.handleVouch: a promise to holder, unless this
// instance reaches the API server (then so may the operator), is a
// primary (its status's role: "" in a manager that has not learnt its
// role yet), is becoming one (closed), or knows the lease names another
// holder. done hears whether it promised.
func (n *simNode) handleVouch(holder, lsn string, done func(bool)) {
	managers := n.managers
	n.reachesAPI(func(reaches bool) {
		switch {
		case n.managers != managers || !n.managerUp:
			return // the manager restarted: no answer
		case reaches && !n.w.cfg.promiseReachingAPI:
			done(false)
			return
		case n.role == string(instanceapi.RolePrimary) || holder == n.name:
			done(false)
			return
		case n.holder != "" && n.holder != holder:
			done(false)
			return
		}
		if !n.promise.give(holder, lsn, n.clock()) {
			done(false)
			return
		}
		n.w.promises++
		done(true)
	})
}

// simAPIWatch is instance.apiWatch: when the lease watch last saw an
// event (seen), and the last read reachesAPI made (checked; failed, that
// it failed; reading, that it is under way).
type simAPIWatch struct {
	seen, checked   time.Time
	failed, reading bool
}

// reachesAPI is Manager.reachesAPI: true while the watch saw an event
// within two renewal periods; else the lease read at most once per
// VouchPeriod, given up after half of it; between reads, or while one is
// under way, only the last one's failure says the API is out of reach.
func (n *simNode) reachesAPI(done func(bool)) {
	w, a := n.w, &n.apiWatch
	now := n.clock()
	switch {
	case now.Sub(a.seen) < 2*instanceapi.LeaseRenewPeriod:
		done(true)
		return
	case a.reading || now.Sub(a.checked) < instanceapi.VouchPeriod:
		done(!(a.failed && !a.reading))
		return
	}
	a.checked, a.reading = now, true
	managers := n.managers
	apiCall(w, n.idx, instanceapi.VouchReadLimit, w.getLease, func(_ *coordinationv1.Lease, ok bool) {
		if n.managers != managers {
			return
		}
		a.failed, a.reading = !ok, false
		done(ok)
	})
}
