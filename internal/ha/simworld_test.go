package ha

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// The simulated world: true time advancing in simTick steps, a network of
// endpoints whose links a fault cuts, and an API server holding the one
// primary Lease. See sim_test.go for what it checks.

const (
	simTick = 10 * time.Millisecond
	// Endpoints: the instances are 0..simNodes-1.
	simNodes   = 3
	epAPI      = simNodes
	epOperator = simNodes + 1
	epClient   = simNodes + 2
	simEPs     = simNodes + 3
)

// simEpoch is true time zero; a clock reads simEpoch + true time + its skew.
var simEpoch = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// simConfig is a family of schedules; the zero value is the protocol as
// written, asynchronous.
type simConfig struct {
	// required: synchronous replication with required durability, ANY 1
	// of the two other instances.
	required bool
	// skew bounds the difference between any two clocks; zero is
	// instanceapi.MaxClockSkew.
	skew time.Duration
	// outages is the share of schedules that, besides their usual faults,
	// lose the API server for long (control-plane outage for everyone,
	// or for the holder alone), drawn from the second source (vrng).
	outages float64
	// staggered: every such outage is the control plane's and comes back
	// for one endpoint after another (without it, half the outages are
	// the control plane's, and half of those come back so).
	staggered bool
	// liveness: the schedule's one fault is a long control-plane outage,
	// and the holder must serve through it (simResult.outageStop,
	// outageGap).
	liveness bool
	// healthy: no message is slow (by default 1 in 100 to the API server
	// or between instances takes 0.1 to 1.5 s, past a promise ask's
	// timeout at times), and a lease watch delivers within 30 ms (by
	// default with its instance's streaming lag, up to 2 s): the liveness
	// check's "no other fault".
	healthy bool
	// Mutations that must make the checks fail.
	noFence   bool // the holder never fences when its lease runs out
	pickLeast bool // failover promotes the answering replica with the least WAL
	// countFromAnswer: the holder counts a promise from the answer's
	// arrival, for the whole PromiseDuration (no margin).
	countFromAnswer bool
	// ignorePromise: a replica's claim to become a primary ignores its
	// promise (promote, start as primary).
	ignorePromise bool
	// operatorIgnoresPromises: failover weighs a replica that promised the
	// holder like any other (PromisedTo dropped).
	operatorIgnoresPromises bool
	// noPromises: the holder never asks for promises (serving past its
	// term never happens): the liveness check must fail.
	noPromises bool
	// promiseReachingAPI: a replica promises though it reaches the API
	// server (as ead3886 had it: a holder cut off alone serves on).
	promiseReachingAPI bool
	// terms: spec.ha. Each instance runs with a lease term of its own
	// (as during the rollout of a new spec.ha.leaseDurationSeconds), the
	// operator writes another at a move, and waits a failover delay,
	// each drawn from a third source (trng): the other draws stay.
	terms bool
	// fenceByLongest: an instance records its term at each renewal but
	// fences by the longest a Lease may record (MaxLeaseDuration).
	fenceByLongest bool
}

// simTerms are the terms (spec.ha.leaseDurationSeconds) a schedule with
// terms draws from; the settle bound leaves room for the longest.
var simTerms = []time.Duration{5 * time.Second, 7 * time.Second, 10 * time.Second, 15 * time.Second}

type simEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// simQueue is a min-heap of events by time, then by scheduling order.
type simQueue []simEvent

func (q simQueue) less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}

func (q *simQueue) push(e simEvent) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *simQueue) pop() simEvent {
	h := *q
	e := h[0]
	last := len(h) - 1
	h[0], h[last] = h[last], simEvent{}
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	*q = h
	return e
}

type simWorld struct {
	cfg  simConfig
	seed uint64
	rng  *rand.Rand
	// vrng draws what promises added (their messages, the outages), so the
	// draws of rng, and with them a seed's schedule, stay what they were.
	vrng  *rand.Rand
	now   time.Duration
	seq   uint64
	queue simQueue
	// cut counts the faults that cut each link; a link is up at zero.
	cut [simEPs][simEPs]int

	lease   *coordinationv1.Lease // the API server's
	rv      int
	leaseAt time.Duration // when it last changed

	nodes   [simNodes]*simNode
	op      *simOperator
	clients []*simClient
	// rw is the instance the -rw Service sends to; direct, the one the
	// second client writes to (the primary a fault struck).
	rw, direct int
	nextID     int
	timelines  int
	stopWrites time.Duration
	faults     []simFault

	ops  []*simOp
	acks []simAck
	runs []simRun
	// stops: a primary stopped accepting writes (fence, crash, restart).
	stops []simStop
	// outage is the long outage of the API server, if the schedule has
	// one; promises counts the promises given.
	outage   *simFault
	promises int
	// pastTerm counts the guard's checks (about one a second) that let a
	// primary serve past its term.
	pastTerm int
	// outageRecorded: the holder the outage struck had recorded its
	// vouchers by then (a renewal succeeded): it may serve past its term.
	outageRecorded bool

	tracing bool
	trace   []string
}

// at runs fn at true time t (at the first tick not before it).
func (w *simWorld) at(t time.Duration, fn func()) {
	w.seq++
	w.queue.push(simEvent{at: max(t, w.now), seq: w.seq, fn: fn})
}

func (w *simWorld) after(d time.Duration, fn func()) { w.at(w.now+d, fn) }

// between draws a duration in [lo, hi).
func (w *simWorld) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *simWorld) chance(p float64) bool { return w.rng.Float64() < p }

// vbetween is between, drawn from vrng.
func (w *simWorld) vbetween(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.vrng.Int64N(int64(hi-lo)))
}

// clock is what a clock skewed by skew reads now.
func (w *simWorld) clock(skew time.Duration) time.Time { return simEpoch.Add(w.now + skew) }

// trueTime is when a clock skewed by skew reads t.
func trueTime(t time.Time, skew time.Duration) time.Duration { return t.Sub(simEpoch) - skew }

// simAt is trueTime for the trace: "never" for a zero time.
func simAt(t time.Time, skew time.Duration) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%.2fs", trueTime(t, skew).Seconds())
}

func (w *simWorld) up(a, b int) bool { return w.cut[a][b] == 0 }

func (w *simWorld) cutLink(a, b, by int) {
	w.cut[a][b] += by
	w.cut[b][a] += by
}

func (w *simWorld) logf(format string, args ...any) {
	if w.tracing {
		w.trace = append(w.trace, fmt.Sprintf("%8.2fs ", w.now.Seconds())+fmt.Sprintf(format, args...))
	}
}

// netLatency is one way between pods; apiLatency one way to the API
// server, now and then slow.
func (w *simWorld) netLatency() time.Duration {
	return w.between(time.Millisecond, 10*time.Millisecond)
}

func (w *simWorld) apiLatency() time.Duration {
	if w.chance(0.01) && !w.cfg.healthy {
		return w.between(100*time.Millisecond, 1500*time.Millisecond)
	}
	return w.between(2*time.Millisecond, 20*time.Millisecond)
}

// apiCall sends a request from endpoint from to the API server, which
// carries out op when it arrives; done gets its answer, or false once
// timeout has passed since the call (the request or the answer lost: op
// may have been carried out all the same).
func apiCall[T any](w *simWorld, from int, timeout time.Duration, op func() T, done func(T, bool)) {
	answered := false
	answer := func(res T, ok bool) {
		if !answered {
			answered = true
			done(res, ok)
		}
	}
	w.after(timeout, func() {
		var zero T
		answer(zero, false)
	})
	if !w.up(from, epAPI) {
		return
	}
	w.after(w.apiLatency(), func() {
		if answered || !w.up(from, epAPI) {
			return
		}
		res := op()
		w.after(w.apiLatency(), func() {
			if w.up(from, epAPI) {
				answer(res, true)
			}
		})
	})
}

// getLease is a GET of the Lease.
func (w *simWorld) getLease() *coordinationv1.Lease { return w.lease.DeepCopy() }

// updateLease is an UPDATE of the Lease: it fails on a resourceVersion
// other than the stored one, as the API server's optimistic concurrency
// does.
func (w *simWorld) updateLease(l *coordinationv1.Lease) bool {
	if l.ResourceVersion != w.lease.ResourceVersion {
		return false
	}
	w.rv++
	w.lease = l.DeepCopy()
	w.lease.ResourceVersion = strconv.Itoa(w.rv)
	w.leaseAt = w.now
	return true
}

// syncNames is the synchronous_standby_names a primary named self starts
// with, and with required durability keeps: ANY 1 of the others, or none.
func (w *simWorld) syncNames(self string) string {
	var r instanceapi.Replication
	for i := range simNodes {
		r.Instances = append(r.Instances, simName(i))
	}
	if w.cfg.required {
		r.Synchronous, r.Required = 1, true
	}
	return instanceapi.SynchronousStandbyNames(r, self, nil)
}

func simName(i int) string { return "db-" + strconv.Itoa(i) }

func simIndex(name string) int {
	for i := range simNodes {
		if simName(i) == name {
			return i
		}
	}
	return -1
}

func newSimWorld(seed uint64, cfg simConfig) *simWorld {
	if cfg.skew == 0 {
		cfg.skew = instanceapi.MaxClockSkew
	}
	w := &simWorld{cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), vrng: rand.New(rand.NewPCG(seed, 0x70c4))}
	skew := func() time.Duration { return w.between(-cfg.skew/2, cfg.skew/2+1) }
	for i := range simNodes {
		w.nodes[i] = newSimNode(w, i, skew())
	}
	w.op = &simOperator{w: w, skew: skew(), lag: w.between(5*time.Millisecond, 100*time.Millisecond)}
	if cfg.terms {
		trng := rand.New(rand.NewPCG(seed, 0x7e2a))
		for _, n := range w.nodes {
			n.leaseTerm = simTerms[trng.IntN(len(simTerms))]
		}
		w.op.term = simTerms[trng.IntN(len(simTerms))]
		w.op.delay = time.Duration(trng.Int64N(int64(5 * time.Second)))
	}
	// db-0 starts as the primary, its lease just renewed, the replicas
	// streaming from it.
	p := w.nodes[0]
	renewed := metav1.NewMicroTime(w.clock(p.skew))
	w.lease = &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "db-primary", ResourceVersion: "1", Annotations: map[string]string{
			instanceapi.AnnotationLeaseLSN: simLSN(0), instanceapi.AnnotationSync: w.syncNames(p.name)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(p.name), RenewTime: &renewed, AcquireTime: &renewed,
			LeaseDurationSeconds: simSeconds(p.leaseTerm), LeaseTransitions: ptr.To(int32(0))},
	}
	w.rv = 1
	w.timelines = 1
	for _, n := range w.nodes {
		n.boot(p)
	}
	w.op.cache, w.op.seenRV = w.getLease(), w.rv
	w.op.schedule()
	return w
}

// simFault is one fault episode; target is resolved when it starts.
type simFault struct {
	kind      simFaultKind
	at, until time.Duration
	target    int
	// later, for a control-plane outage, is how long after until each
	// endpoint (by index, the operator's too) gets the API server back
	// (nil: all at once).
	later      []time.Duration
	holderLast time.Duration // when not 0, the holder's later instead
}

type simFaultKind int

const (
	faultAPI             simFaultKind = iota // the primary cut from the API server
	faultIsolate                             // the primary cut from the API, its peers and the operator, not its direct client
	faultOperator                            // the primary cut from the operator
	faultCrash                               // the primary's postgres crashes; its manager starts it again
	faultRestart                             // the primary's container restarts: its manager forgets everything
	faultReplicaOperator                     // a replica cut from the operator
	faultReplicaPeers                        // a replica cut from its peers
	faultReplicaAPI                          // a replica cut from the API server
	faultReplicaCrash                        // a replica's postgres crashes
	faultOperatorAPI                         // the operator cut from the API server
	simFaultKinds                            // the usual faults are those above
	// Drawn apart from the usual faults (simConfig.outages): every
	// instance and the operator cut from the API server; the primary cut
	// from one replica (its stream and its promises), not from the others.
	faultControlPlane  = simFaultKinds
	faultHolderReplica = simFaultKinds + 1
)

var simFaultNames = [...]string{"primary cut from the API", "primary isolated but for its client", "primary cut from the operator",
	"primary's postgres crashes", "primary's container restarts", "replica cut from the operator", "replica cut from its peers",
	"replica cut from the API", "replica's postgres crashes", "operator cut from the API",
	"control plane down (the API server unreachable for all)", "primary cut from one replica"}

// plan draws the faults of the schedule; each strikes the lease holder
// (or a replica of it) at its start.
func (w *simWorld) plan() {
	healed := 20 * time.Second
	if w.cfg.liveness {
		w.planOutage(w.between(4*time.Second, 8*time.Second))
		w.stopWrites = w.outage.until + 2*time.Second
		return
	}
	for range 1 + w.rng.IntN(3) {
		f := simFault{kind: simFaultKind(w.rng.IntN(int(simFaultKinds))), at: w.between(time.Second, 25*time.Second)}
		f.until = f.at + w.between(200*time.Millisecond, 14*time.Second)
		healed = max(healed, f.until)
		w.faults = append(w.faults, f)
		w.at(f.at, func() { w.strike(f) })
	}
	if w.vrng.Float64() < w.cfg.outages {
		w.planOutage(w.vbetween(time.Second, 30*time.Second))
		healed = max(healed, w.outage.until+slices.Max(append(w.outage.later, w.outage.holderLast)))
	}
	w.stopWrites = healed + 2*time.Second
}

// planOutage adds a long outage of the API server from at, 10 to 30 s:
// for everyone (the control plane down), or (but in a liveness schedule)
// for the holder alone.
func (w *simWorld) planOutage(at time.Duration) {
	f := simFault{kind: faultControlPlane, at: at}
	if !w.cfg.liveness && w.vrng.IntN(2) == 0 && !w.cfg.staggered {
		f.kind = faultAPI
	}
	f.until = f.at + w.vbetween(10*time.Second, 30*time.Second)
	if f.kind == faultControlPlane && !w.cfg.liveness && (w.vrng.IntN(2) == 0 || w.cfg.staggered) {
		// Half the time it comes back for one after another, within 8 s,
		// and then half the time for the holder (resolved as it strikes)
		// 4 to 15 s after the others: from serving on promises it goes on
		// cut off alone.
		f.later = make([]time.Duration, simEPs)
		for _, ep := range []int{0, 1, 2, epOperator} {
			f.later[ep] = w.vbetween(0, 8*time.Second)
		}
		if w.vrng.IntN(2) == 0 {
			f.holderLast = 8*time.Second + w.vbetween(4*time.Second, 15*time.Second)
		}
	}
	w.outage = &f
	w.faults = append(w.faults, f)
	w.at(f.at, func() {
		h := w.nodes[simIndex(ptr.Deref(w.lease.Spec.HolderIdentity, ""))]
		w.outage.target, w.outageRecorded = h.idx, h.vouch.recorded
		w.strike(f)
	})
	if w.cfg.liveness || w.vrng.IntN(2) == 0 {
		return
	}
	// Half the time the holder loses one replica meanwhile: the case that
	// its promises must all cover it for.
	c := simFault{kind: faultHolderReplica, at: f.at + w.vbetween(0, 6*time.Second)}
	c.until = c.at + w.vbetween(2*time.Second, 20*time.Second)
	w.faults = append(w.faults, c)
	w.at(c.at, func() { w.strike(c) })
}

func (w *simWorld) strike(f simFault) {
	holder := simIndex(ptr.Deref(w.lease.Spec.HolderIdentity, ""))
	f.target = holder
	who := simName(holder)
	switch {
	case f.kind == faultControlPlane:
		who = "everyone"
	case f.kind == faultOperatorAPI:
		who = "operator"
	case f.kind == faultHolderReplica:
		f.target = (holder + 1 + w.vrng.IntN(simNodes-1)) % simNodes
		who = simName(holder) + " and " + simName(f.target)
	case f.kind >= faultReplicaOperator:
		f.target = (holder + 1 + w.rng.IntN(simNodes-1)) % simNodes
		who = simName(f.target)
	default:
		w.direct = holder
	}
	var links [][2]int
	switch f.kind {
	case faultAPI:
		links = [][2]int{{f.target, epAPI}}
	case faultIsolate:
		links = [][2]int{{f.target, epAPI}, {f.target, epOperator}}
		for i := range simNodes {
			if i != f.target {
				links = append(links, [2]int{f.target, i})
			}
		}
	case faultOperator, faultReplicaOperator:
		links = [][2]int{{f.target, epOperator}}
	case faultReplicaPeers:
		for i := range simNodes {
			if i != f.target {
				links = append(links, [2]int{f.target, i})
			}
		}
	case faultReplicaAPI:
		links = [][2]int{{f.target, epAPI}}
	case faultOperatorAPI:
		links = [][2]int{{epOperator, epAPI}}
	case faultHolderReplica:
		links = [][2]int{{holder, f.target}}
	case faultControlPlane:
		links = [][2]int{{epOperator, epAPI}}
		for i := range simNodes {
			links = append(links, [2]int{i, epAPI})
		}
	case faultCrash, faultReplicaCrash:
		w.logf("%s: postgres crashes", simName(f.target))
		w.nodes[f.target].crash()
		return
	case faultRestart:
		w.logf("%s: container restarts", simName(f.target))
		w.nodes[f.target].restartContainer(f.until - f.at)
		return
	}
	w.logf("%s: %s until %.2fs", who, simFaultNames[f.kind], f.until.Seconds())
	for _, l := range links {
		w.cutLink(l[0], l[1], 1)
	}
	if f.later != nil {
		// The control plane comes back for one endpoint after another.
		if f.holderLast > 0 {
			f.later[holder] = f.holderLast
		}
		for _, l := range links {
			ep := l[0] // each link is {endpoint, epAPI}
			w.at(f.until+f.later[ep], func() {
				who := "operator"
				if ep < simNodes {
					who = simName(ep)
				}
				w.logf("%s: healed (%s)", who, simFaultNames[f.kind])
				w.cutLink(l[0], l[1], -1)
			})
		}
		return
	}
	w.at(f.until, func() {
		w.logf("%s: healed (%s)", who, simFaultNames[f.kind])
		for _, l := range links {
			w.cutLink(l[0], l[1], -1)
		}
	})
}

// step advances true time by a tick: the events due, then what flows
// continuously (watches, streaming, synchronous commits).
func (w *simWorld) step() {
	w.now += simTick
	for len(w.queue) > 0 && w.queue[0].at <= w.now {
		w.queue.pop().fn()
	}
	for _, n := range w.nodes {
		n.watch()
	}
	w.op.watch()
	for _, n := range w.nodes {
		n.stream()
	}
	for _, n := range w.nodes {
		n.releaseCommits()
	}
}

// settled: every fault healed, no write outstanding, the holder a running
// primary, every other instance a replica holding exactly its WAL.
func (w *simWorld) settled() bool {
	if w.now < w.stopWrites {
		return false
	}
	for _, c := range w.clients {
		if !c.done {
			return false
		}
	}
	h := simIndex(ptr.Deref(w.lease.Spec.HolderIdentity, ""))
	p := w.nodes[h]
	if !p.accepting() || !p.running || p.guarded != p.run {
		return false
	}
	for _, n := range w.nodes {
		if n != p && (n.role != string(instanceapi.RoleReplica) || n.pg != pgUp || len(n.wal) != len(p.wal) || !n.follows(p)) {
			return false
		}
	}
	return true
}
