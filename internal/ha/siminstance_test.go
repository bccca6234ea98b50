package ha

import (
	"cmp"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// An instance: postgres (its WAL, its role) and its instance manager, as
// internal/instance runs them (learnRole, holdLease, renewBefore, promote,
// rejoin, holderIs, observe). Callbacks carry the run of postgres they
// belong to and do nothing once it ended, as the real ones end with their
// context.

type pgState int

const (
	pgDown pgState = iota
	pgStarting
	pgUp // accepts connections (and, as a primary, writes)
)

// simEntry is one WAL record: a write's id, or -timeline for the record a
// promotion starts its timeline with. An id sits at the same position in
// every WAL that holds it, so two WALs agree up to a position exactly when
// they hold the same record there.
type simEntry struct {
	id int
	at time.Duration // when this instance got it
}

const (
	simLSNBase    = 0x3000000
	simEntryBytes = 256 << 10 // MaxFailoverLag is 64 records
)

func simLSN(records int) string {
	return postgres.FormatLSN(simLSNBase + uint64(records)*simEntryBytes)
}

type simPending struct {
	op    *simOp
	lsn   int
	reply func(simOutcome)
}

type simNode struct {
	// leaseTerm is the lease term this instance records at its renewals
	// and fences by (0: the contract's LeaseDuration).
	leaseTerm time.Duration
	w         *simWorld
	idx       int
	name      string
	skew      time.Duration

	// postgres
	pg       pgState
	run      int
	role     string
	wal      []simEntry
	timeline int
	upstream int // the instance a replica streams from; -1 none
	lag      time.Duration
	pending  []simPending
	// ranAsPrimary: the data last ran as a primary, so a replica start
	// rewinds it first (no standby.signal); diverged: it replayed past a
	// fork (rewindMark).
	ranAsPrimary, diverged bool

	// the instance manager's memory
	managerUp             bool
	holder                string
	seenRV                int
	seenTransitions       int32
	term                  int32 // the lease's transitions when this run became primary
	leaseUntil, heartbeat time.Time
	running               bool      // status.Phase Running
	status                simStatus // the last observation
	syncRecord            string
	guarded, duties       int // the runs holdLease and the heartbeat started for
	promoteMu             int // the promotion under way (promoteMu held), 0 none
	promotions            int
	waiters               []func(bool) // promote calls waiting for the one under way
	promoting             bool         // pg_promote runs (Manager.promoting)
	managers              int          // the manager's starts: a container restart is another
	// promise is this instance's promise not to be promoted (on its
	// volume), vouch the promises it holds as a holder (simvouch_test.go).
	promise  simPromise
	vouch    simVouch
	apiWatch simAPIWatch
	// onPromises: holdLease last found it past its term (for the trace).
	onPromises bool
}

type simStatus struct {
	lsn, received string
	timeline      int32
}

func newSimNode(w *simWorld, i int, skew time.Duration) *simNode {
	return &simNode{w: w, idx: i, name: simName(i), skew: skew, upstream: -1, managerUp: true,
		lag: w.between(2*time.Millisecond, 30*time.Millisecond)}
}

func (n *simNode) clock() time.Time { return n.w.clock(n.skew) }

// fenceTerm is the term the instance fences by: the one it records
// (Manager.leaseTerm), unless the mutation fenceByLongest.
func (n *simNode) fenceTerm() time.Duration {
	if n.w.cfg.fenceByLongest {
		return instanceapi.MaxLeaseDuration
	}
	return cmp.Or(n.leaseTerm, instanceapi.LeaseDuration)
}

// simSeconds is a term as a Lease records it (0: LeaseDuration).
func simSeconds(d time.Duration) *int32 {
	return ptr.To(int32(cmp.Or(d, instanceapi.LeaseDuration) / time.Second))
}

func (n *simNode) accepting() bool { return n.pg == pgUp && n.role == string(instanceapi.RolePrimary) }

func (n *simNode) replica() bool { return n.role == string(instanceapi.RoleReplica) }

// boot starts the instance at true time zero, running, p the primary
// and its lease just renewed.
func (n *simNode) boot(p *simNode) {
	n.holder, n.seenRV, n.seenTransitions, n.timeline = p.name, 1, 0, 1
	n.run, n.pg = 1, pgUp
	n.role, n.upstream = string(instanceapi.RoleReplica), p.idx
	n.syncRecord = n.w.syncNames(n.name) // writeStartConfig, replicas too
	if n == p {
		n.role, n.upstream = string(instanceapi.RolePrimary), -1
		n.leaseUntil = ServeUntil(n.clock(), n.fenceTerm())
		n.servingFrom(n.run)
		n.guardLease(n.run)
	}
	n.monitor(n.run)
	n.redrawLag()
}

// redrawLag varies how far behind its upstream a replica streams.
func (n *simNode) redrawLag() {
	w := n.w
	switch r := w.rng.Float64(); {
	case r < 0.7:
		n.lag = w.between(2*time.Millisecond, 30*time.Millisecond)
	case r < 0.95:
		n.lag = w.between(30*time.Millisecond, 300*time.Millisecond)
	default:
		n.lag = w.between(300*time.Millisecond, 2*time.Second)
	}
	w.after(w.between(500*time.Millisecond, 1500*time.Millisecond), n.redrawLag)
}

// start is supervise: postgres starts in the role the manager holds, the
// lease guard armed before it can take a write (a primary's run, or any
// while a promotion runs), the monitor ticking.
func (n *simNode) start() {
	w := n.w
	n.run++
	run := n.run
	n.pg, n.running = pgStarting, false
	n.syncRecord = n.w.syncNames(n.name) // writeStartConfig: the setting it starts with
	n.upstream = -1
	if n.replica() {
		n.upstream = simIndex(n.holder) // writeConfig: stream from the holder as last seen
	}
	n.guardLease(run)
	w.after(w.between(200*time.Millisecond, 2*time.Second), func() {
		if n.run != run {
			return
		}
		n.pg = pgUp
		if n.accepting() {
			n.servingFrom(run)
		}
	})
	n.monitor(run)
}

// servingFrom records that this run accepts writes from now, and under
// which term.
func (n *simNode) servingFrom(_ int) {
	n.ranAsPrimary = true
	n.w.runs = append(n.w.runs, simRun{node: n.idx, term: n.term, start: n.w.now})
	n.w.logf("%s: primary of term %d, serving until %.2fs", n.name, n.term, trueTime(n.leaseUntil, n.skew).Seconds())
}

// stop ends the run of postgres: killed (a fence), crashed, or shut down.
func (n *simNode) stop() {
	if n.accepting() {
		n.w.stops = append(n.w.stops, simStop{node: n.idx, at: n.w.now})
	}
	n.run++
	n.pg, n.running = pgDown, false
	n.status = simStatus{}
	n.heartbeat = time.Time{}
	for _, p := range n.pending {
		p.reply(outcomeLost)
	}
	n.pending = nil
}

func (n *simNode) crash() {
	if n.pg == pgDown {
		return
	}
	n.stop()
	n.w.after(200*time.Millisecond, n.prepare) // crashPause
}

// restartContainer: postgres and the manager go, for down; the manager
// starts afresh, remembering nothing.
func (n *simNode) restartContainer(down time.Duration) {
	n.stop() // a promotion under way fails with its run, its call with the manager
	n.managerUp, n.managers = false, n.managers+1
	n.holder, n.leaseUntil, n.syncRecord, n.seenRV, n.promoting = "", time.Time{}, "", 0, false
	// A new manager's status names no role (no --role with a lease) until
	// learnRole; it holds no promises, and loads the one it gave.
	n.role = ""
	n.vouch.reset()
	n.apiWatch = simAPIWatch{}
	n.w.after(down, func() {
		n.managerUp = true
		n.promise.load()
		n.prepare()
	})
}

// fence kills postgres after a fence latency, then starts again in the
// role the lease gives.
func (n *simNode) fence(run int, why string) {
	w := n.w
	w.after(w.between(0, instanceapi.FenceLatency-simTick), func() {
		if n.run != run {
			return
		}
		w.logf("%s: fenced: %s", n.name, why)
		n.stop()
		n.prepare()
	})
}

// prepare is learnRole: the role from the lease (waiting while the API
// does not answer), for a primary its lease extended first when it has
// under a renewal period left; then prepared.
func (n *simNode) prepare() {
	w := n.w
	run := n.run
	apiCall(w, n.idx, 2*time.Second, w.getLease, func(l *coordinationv1.Lease, ok bool) {
		if n.run != run || !n.managerUp {
			return
		}
		holder := ""
		if ok {
			holder = ptr.Deref(l.Spec.HolderIdentity, "")
		}
		if holder == "" {
			w.after(time.Second, n.prepare)
			return
		}
		n.holder = holder
		if holder != n.name {
			n.role = string(instanceapi.RoleReplica)
			n.leaseUntil = time.Time{} // setRole: a replica again
			n.vouch.reset()
			n.promise.reopen()
			n.prepared(run)
			return
		}
		n.role = string(instanceapi.RolePrimary)
		n.term = ptr.Deref(l.Spec.LeaseTransitions, 0)
		v := simView(l)
		n.leaseUntil = later(n.leaseUntil, v.validUntil())
		// mayStartAsPrimary: a promise to another holder binds.
		if !n.promise.claim(n.name, v.releasedBy, v.handoverLSN != "", n.clock(), w.cfg.ignorePromise) {
			w.logf("%s: waiting to start as the primary: promised %s until %.2fs", n.name, n.promise.holder,
				trueTime(n.promise.until, n.skew).Seconds())
			w.after(time.Second, n.prepare)
			return
		}
		if n.leaseUntil.Sub(n.clock()) >= instanceapi.LeaseRenewPeriod {
			n.prepared(run)
			return
		}
		// Released, or about to run out: postgres starts as a primary only
		// under a lease it can count on, else the lease is read again.
		n.extendBefore(run, instanceapi.LeaseRenewPeriod, func(ok, _ bool) {
			switch {
			case n.run != run:
			case ok:
				w.logf("%s: extended the lease to start as the primary, serving until %.2fs", n.name, trueTime(n.leaseUntil, n.skew).Seconds())
				n.prepared(run)
			default:
				w.logf("%s: could not extend the lease to start as the primary; reading it again", n.name)
				w.after(time.Second, n.prepare)
			}
		})
	})
}

// prepared is the rest of prepare once the role is known: a rewind of data
// that ran as a primary, then a start.
func (n *simNode) prepared(run int) {
	w := n.w
	w.after(w.between(50*time.Millisecond, 300*time.Millisecond), func() {
		if n.run != run {
			return
		}
		if n.replica() && (n.ranAsPrimary || n.diverged) {
			n.rejoin(run, w.now)
			return
		}
		n.start()
	})
}

// rejoin rewinds the data to follow the holder: it waits for the holder
// to answer (and for its promotion, promotionWait at most), then keeps
// the WAL the two share.
func (n *simNode) rejoin(run int, since time.Duration) {
	w := n.w
	if n.run != run {
		return
	}
	i := simIndex(n.holder)
	if i == n.idx {
		n.prepare() // named meanwhile: learn the role again
		return
	}
	src := w.nodes[i]
	if !w.up(n.idx, src.idx) || src.pg != pgUp || src.replica() && w.now-since < 5*time.Second {
		w.after(2*time.Second, func() { n.rejoin(run, since) })
		return
	}
	w.after(w.between(300*time.Millisecond, 2*time.Second), func() {
		if n.run != run {
			return
		}
		k := commonPrefix(n.wal, src.wal)
		w.logf("%s: rewound from %s, %d records kept of %d", n.name, src.name, k, len(n.wal))
		n.wal = n.wal[:k:k]
		n.timeline, n.ranAsPrimary, n.diverged = src.timeline, false, false
		n.start()
	})
}

// monitor observes the running server every second: positions, phase
// Running, the synchronous setting recorded, and on a primary the duties
// (heartbeat, lease guard) once per run.
func (n *simNode) monitor(run int) {
	if n.run != run {
		return
	}
	if n.pg == pgUp {
		n.running = true
		n.status = simStatus{lsn: simLSN(len(n.wal)), timeline: int32(n.timeline)}
		if n.replica() {
			n.status.received = n.status.lsn
		} else {
			n.syncRecord = n.w.syncNames(n.name) // manageSync
			if n.duties != run {
				n.duties = run
				n.beat(run)
				n.vouchLoop(run)
				n.guardLease(run)
			}
		}
	}
	n.w.after(time.Second, func() { n.monitor(run) })
}

// answer is the instance's status, as the operator asks it: the last
// observation, or with fresh the WAL positions read now from a server
// that runs (QueryFresh).
func (n *simNode) answer(fresh bool) v1alpha1.InstanceStatus {
	s := n.status
	if fresh && n.pg == pgUp && n.running {
		s.lsn = simLSN(len(n.wal))
		if n.replica() {
			s.received = s.lsn
		}
	}
	out := v1alpha1.InstanceStatus{Name: n.name, Role: n.role, LSN: s.lsn, ReceivedLSN: s.received, Timeline: s.timeline}
	if h, ok := n.promise.active(n.clock()); ok {
		out.PromisedTo = h
	}
	return out
}

// vouched is the rest of the answer failover reads (askInstances' map):
// the last holder that asked for a promise and its WAL position then.
func (n *simNode) vouched() instanceapi.Status {
	return instanceapi.Status{VouchedFor: n.promise.holder, VouchedLSN: n.promise.lsn}
}

// follows: this replica's WAL is a prefix of u's, or u, a replica too,
// holds a prefix of it: it can stream from u.
func (n *simNode) follows(u *simNode) bool {
	k := min(len(n.wal), len(u.wal))
	if k > 0 && n.wal[k-1].id != u.wal[k-1].id {
		return false
	}
	return len(n.wal) <= len(u.wal) || u.replica()
}

// stream receives the upstream's WAL, lag behind it; a replica that
// replayed past the upstream's fork stops to be rewound.
func (n *simNode) stream() {
	w := n.w
	if !n.replica() || n.pg != pgUp || n.upstream < 0 || n.upstream == n.idx {
		return
	}
	u := w.nodes[n.upstream]
	if u.pg != pgUp || !w.up(n.idx, u.idx) {
		return
	}
	if !n.follows(u) {
		w.logf("%s: diverged from %s; stopping to rewind", n.name, u.name)
		n.diverged = true
		n.stop()
		n.prepare()
		return
	}
	n.timeline = max(n.timeline, u.timeline)
	for len(n.wal) < len(u.wal) && u.wal[len(n.wal)].at+n.lag <= w.now {
		n.wal = append(n.wal, simEntry{id: u.wal[len(n.wal)].id, at: w.now})
	}
}

// write is a client's INSERT arriving: refused unless this is a primary,
// acknowledged at once when asynchronous, else once a named standby
// streaming from it has it.
func (n *simNode) write(op *simOp, reply func(simOutcome)) {
	if !n.accepting() {
		reply(outcomeRefused)
		return
	}
	n.wal = append(n.wal, simEntry{id: op.id, at: n.w.now})
	if !n.w.cfg.required {
		n.ack(op)
		reply(outcomeAck)
		return
	}
	n.pending = append(n.pending, simPending{op: op, lsn: len(n.wal), reply: reply})
}

func (n *simNode) ack(op *simOp) {
	op.acker = n.name
	n.w.acks = append(n.w.acks, simAck{node: n.idx, term: n.term, at: n.w.now, id: op.id})
}

// releaseCommits acknowledges the commits a synchronous standby (any
// other instance, streaming from this one) has.
func (n *simNode) releaseCommits() {
	if len(n.pending) == 0 {
		return
	}
	have := 0
	for _, r := range n.w.nodes {
		if r != n && r.upstream == n.idx && r.pg == pgUp && r.replica() && n.w.up(r.idx, n.idx) && r.follows(n) {
			have = max(have, len(r.wal))
		}
	}
	i := 0
	for ; i < len(n.pending) && n.pending[i].lsn <= have; i++ {
		n.ack(n.pending[i].op)
		n.pending[i].reply(outcomeAck)
	}
	n.pending = n.pending[i:]
}
