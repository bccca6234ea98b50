package ha

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// The operator's failover as internal/controller/database runs it: the
// lease from its informer's cache, the instances asked (all but a holder
// whose lease expired) with their last observations; once the lease
// expired, asked again with positions read now, DecideFailover on those,
// the lease moved by an UPDATE carrying the cached resourceVersion,
// renewTime from the operator's clock (read before the second ask) and the
// new holder's own synchronous setting, then the promote call, which the
// reconcile waits for.

type simOperator struct {
	w      *simWorld
	skew   time.Duration
	lag    time.Duration
	cache  *coordinationv1.Lease
	seenRV int
	moves  int
	// waiting is why failover last waited, logged when it changes.
	waiting string
	// term is what a move records (spec.ha.leaseDurationSeconds; 0:
	// LeaseDuration); delay is spec.ha.failoverDelaySeconds.
	term, delay time.Duration
}

func (o *simOperator) clock() time.Time { return o.w.clock(o.skew) }

func (o *simOperator) watch() {
	w := o.w
	if o.seenRV == w.rv || !w.up(epOperator, epAPI) || w.now < w.leaseAt+o.lag {
		return
	}
	o.cache, o.seenRV = w.getLease(), w.rv
}

// schedule is the next reconcile: an event, a requeue, a resync.
func (o *simOperator) schedule() {
	o.w.after(o.w.between(100*time.Millisecond, time.Second), o.reconcile)
}

func (o *simOperator) reconcile() {
	w := o.w
	lease := o.cache.DeepCopy()
	skip := ""
	if lease.Spec.RenewTime != nil {
		if st := LeaseStateOf(lease); st.Expired(o.clock()) {
			skip = st.Holder
		}
	}
	o.ask(skip, false, func(statuses []v1alpha1.InstanceStatus, _ map[string]instanceapi.Status) {
		w.after(w.between(10*time.Millisecond, 200*time.Millisecond), func() { o.failover(lease, statuses) })
	})
}

// ask is askInstances: every instance but skip, each call given up after
// a second; fresh asks for positions read now. done hears the statuses and,
// by name, the rest of each answer.
func (o *simOperator) ask(skip string, fresh bool, done func([]v1alpha1.InstanceStatus, map[string]instanceapi.Status)) {
	w := o.w
	out := make([]v1alpha1.InstanceStatus, simNodes)
	byPod := map[string]instanceapi.Status{}
	left := simNodes
	answered := func(i int, s v1alpha1.InstanceStatus) {
		out[i] = s
		if left--; left == 0 {
			done(out, byPod)
		}
	}
	deadline := w.now + time.Second
	for i, n := range w.nodes {
		fail := func(why string) {
			w.at(deadline, func() { answered(i, v1alpha1.InstanceStatus{Name: n.name, Error: why}) })
		}
		if n.name == skip {
			w.after(0, func() {
				answered(i, v1alpha1.InstanceStatus{Name: n.name, Error: "its primary lease expired: not asked"})
			})
			continue
		}
		if !w.up(epOperator, i) {
			fail("the instance manager did not answer")
			continue
		}
		w.after(w.netLatency(), func() {
			if !w.up(epOperator, i) || !n.managerUp {
				fail("the instance manager did not answer")
				return
			}
			s, vouched := n.answer(fresh), n.vouched()
			w.after(w.netLatency(), func() {
				if !w.up(epOperator, i) {
					fail("the instance manager did not answer")
					return
				}
				byPod[n.name] = vouched
				answered(i, s)
			})
		})
	}
}

// failover is the reconciler's failover with what it observed.
func (o *simOperator) failover(lease *coordinationv1.Lease, statuses []v1alpha1.InstanceStatus) {
	now := o.clock()
	st := LeaseStateOf(lease)
	if !st.Expired(now) {
		if simHolderIsReplica(statuses, st.Holder) {
			o.promote(st.Holder)
			return
		}
		o.schedule()
		return
	}
	if o.delay > 0 && !st.Expires.IsZero() && now.Before(st.Expires.Add(o.delay)) && !simHolderIsReplica(statuses, st.Holder) {
		o.schedule() // Actor.Failover's wait of spec.ha.failoverDelaySeconds
		return
	}
	// No pod is deleted here, so failover never waited for a release:
	// it asks again, for positions read after the expiry.
	o.ask(st.Holder, true, func(fresh []v1alpha1.InstanceStatus, byPod map[string]instanceapi.Status) {
		o.move(lease, st.WithVouchedLSN(byPod), now, fresh)
	})
}

// move is the rest of failover: DecideFailover on the positions read now,
// the lease moved, the promote call.
func (o *simOperator) move(lease *coordinationv1.Lease, st LeaseState, now time.Time, statuses []v1alpha1.InstanceStatus) {
	w := o.w
	if w.cfg.operatorIgnoresPromises {
		for i := range statuses {
			statuses[i].PromisedTo = ""
		}
	}
	d := DecideFailover(st, now, statuses)
	if d.Promote != "" && w.cfg.pickLeast {
		d.Promote = simLeast(st.Holder, statuses)
	}
	if d.OnPromises != "" {
		// The holder serves on its replicas' promises: no failover.
		if d.OnPromises != o.waiting {
			w.logf("operator: %s", d.OnPromises)
		}
		o.waiting = d.OnPromises
		o.schedule()
		return
	}
	if d.Promote == "" {
		if d.Waiting != o.waiting {
			w.logf("operator: %s", d.Waiting)
		}
		o.waiting = d.Waiting
		o.schedule()
		return
	}
	l := lease.DeepCopy()
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To(d.Promote), &t, &t
	l.Spec.LeaseDurationSeconds = simSeconds(o.term)
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	delete(l.Annotations, instanceapi.AnnotationHandoverLSN)
	// The old holder's vouchers bind the old term only; a holder that
	// released the lease (none does here) stopped serving.
	delete(l.Annotations, instanceapi.AnnotationVouchers)
	delete(l.Annotations, instanceapi.AnnotationReleasedBy)
	if lease.Spec.RenewTime == nil {
		l.Annotations[instanceapi.AnnotationReleasedBy] = st.Holder
	}
	l.Annotations[instanceapi.AnnotationSync] = w.syncNames(d.Promote)
	apiCall(w, epOperator, 10*time.Second, func() bool { return w.updateLease(l) }, func(moved, ok bool) {
		if !ok || !moved {
			why := "no answer"
			if ok {
				why = "the lease changed since it was read"
			}
			w.logf("operator: could not move the lease to %s: %s", d.Promote, why)
			o.schedule()
			return
		}
		o.moves++
		o.waiting = ""
		w.logf("operator: moved the lease from %s to %s, renewTime %.2fs on its clock (weighed %v)",
			st.Holder, d.Promote, now.Sub(simEpoch).Seconds(), d.Weighed)
		target := simIndex(d.Promote)
		w.after(w.between(100*time.Millisecond, 1500*time.Millisecond), func() { w.rw = target }) // labels, kube-proxy
		o.promote(d.Promote)
	})
}

// promote is the promote call, which waits (up to a minute) for a link
// that is down, and the reconcile with it.
func (o *simOperator) promote(name string) {
	w := o.w
	n := w.nodes[simIndex(name)]
	deadline := w.now + time.Minute
	var send func()
	send = func() {
		switch {
		case w.now >= deadline:
			o.schedule()
		case !w.up(epOperator, n.idx):
			w.after(time.Second, send)
		case !n.managerUp:
			o.schedule()
		default:
			w.after(w.netLatency(), func() {
				n.promote(func(bool) {
					var back func()
					back = func() {
						switch {
						case w.now >= deadline:
							o.schedule()
						case !w.up(epOperator, n.idx):
							w.after(time.Second, back)
						default:
							w.after(w.netLatency(), o.schedule)
						}
					}
					back()
				})
			})
		}
	}
	send()
}

func simHolderIsReplica(statuses []v1alpha1.InstanceStatus, holder string) bool {
	for _, s := range statuses {
		if s.Name == holder {
			return s.Error == "" && s.Role == string(instanceapi.RoleReplica)
		}
	}
	return false
}

// simLeast is the mutation pickLeast: the answering replica with the
// least WAL.
func simLeast(holder string, statuses []v1alpha1.InstanceStatus) string {
	best, bestLSN := "", uint64(0)
	for _, s := range statuses {
		lsn, ok := postgres.ParseLSN(s.ReceivedLSN)
		if s.Name == holder || s.Error != "" || s.Role != string(instanceapi.RoleReplica) || !ok {
			continue
		}
		if best == "" || lsn < bestLSN {
			best, bestLSN = s.Name, lsn
		}
	}
	return best
}

// A client writes one id at a time, to the instance target names, each
// write given up after simWriteTimeout.
type simClient struct {
	w      *simWorld
	id     int
	target func() int
	done   bool
}

const simWriteTimeout = 5 * time.Second

type simOutcome int

const (
	outcomePending simOutcome = iota
	outcomeAck
	outcomeRefused // known not to have happened: the instance refused it
	outcomeLost    // may have happened: no answer, or the connection dropped
)

// simOp is one write as its client saw it; acker is the instance that
// acknowledged it, if one did (whether or not the client heard).
type simOp struct {
	id, client, node int
	call, ret        time.Duration
	outcome          simOutcome
	acker            string
}

func (c *simClient) next() {
	w := c.w
	if w.now >= w.stopWrites {
		c.done = true
		return
	}
	t := c.target()
	w.nextID++
	op := &simOp{id: w.nextID, client: c.id, node: t, call: w.now}
	w.ops = append(w.ops, op)
	settle := func(o simOutcome) {
		if op.outcome != outcomePending {
			return
		}
		op.outcome, op.ret = o, w.now
		w.after(w.between(10*time.Millisecond, 100*time.Millisecond), c.next)
	}
	w.after(simWriteTimeout, func() { settle(outcomeLost) })
	if !w.up(epClient, t) {
		w.after(time.Second, func() { settle(outcomeRefused) }) // no connection
		return
	}
	w.after(w.netLatency(), func() {
		w.nodes[t].write(op, func(o simOutcome) {
			w.after(w.netLatency(), func() {
				if w.up(epClient, t) {
					settle(o)
				}
			})
		})
	})
}
