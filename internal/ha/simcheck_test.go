package ha

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/utils/ptr"
)

// simAck: the instance node acknowledged write id at true time at, as the
// primary of term (the lease's transitions when it became primary).
type simAck struct {
	node, id int
	term     int32
	at       time.Duration
}

// simRun: the instance node started accepting writes at true time start,
// as the primary of term.
type simRun struct {
	node  int
	term  int32
	start time.Duration
}

// simStop: the instance node, a primary accepting writes, stopped at true
// time at (a fence, a crash, a container restart).
type simStop struct {
	node int
	at   time.Duration
}

type simResult struct {
	seed uint64
	cfg  simConfig
	// splitAcks counts acknowledgements by the primary of a term at or
	// after a later term's primary started accepting writes; split is the
	// first, described.
	splitAcks int
	split     string
	// linearizable is porcupine's verdict on the writes and the final
	// read (required durability only); lost lists the acknowledged writes
	// the final WAL lacks.
	linearizable bool
	lost         []int
	// stuck: the world did not settle (one primary, replicas caught up)
	// within simSettle of the last write, every fault healed: a failure of
	// liveness, and no final WAL for check 2.
	stuck         bool
	writes, acked int
	moves         int
	simulated     time.Duration
	holder        string
	// With a long outage of the API server (simConfig.liveness): its kind,
	// outageStop describing a stop of the holder it struck while it lasted,
	// and outageGap, the longest stretch of it without an acknowledgement
	// by that holder.
	outageKind simFaultKind
	// outageRecorded: the holder had recorded its vouchers as the outage
	// began (else it may not serve past its term, and nothing is checked).
	outageRecorded bool
	outageStop     string
	outageGap      time.Duration
	// promises counts the promises given; pastTerm, the guard's checks
	// that let a primary serve past its term on them.
	promises, pastTerm int
}

func (r simResult) failed() bool { return r.splitAcks > 0 || !r.linearizable || r.stuck }

// simMaxGap bounds outageGap for asynchronous replication, where an
// acknowledgement waits for nothing but the holder (with required
// durability it waits for a replica's stream too, whose lag the model
// varies up to 2 s: the gap is reported, not bounded).
const simMaxGap = time.Second

// livenessFailed: with a long outage of the API server and no other fault,
// the holder stopped serving, or (asynchronous) acknowledged nothing for
// over simMaxGap.
func (r simResult) livenessFailed() bool {
	return r.outageStop != "" || !r.cfg.required && r.outageGap > simMaxGap
}

func (r simResult) String() string {
	mode := "asynchronous"
	if r.cfg.required {
		mode = "required durability"
	}
	s := fmt.Sprintf("seed %d (%s): %d writes, %d acknowledged, %d lease moves", r.seed, mode, r.writes, r.acked, r.moves)
	if r.splitAcks > 0 {
		s += fmt.Sprintf("; split_acks=%d, first: %s", r.splitAcks, r.split)
	}
	if !r.linearizable {
		s += fmt.Sprintf("; not linearizable: acknowledged writes %v missing from %s's final WAL", r.lost, r.holder)
	}
	if r.stuck {
		s += fmt.Sprintf("; did not settle within %s of the last write, every fault healed", simSettle)
	}
	if r.cfg.liveness && r.livenessFailed() {
		s += fmt.Sprintf("; in the outage (%s): ", simFaultNames[r.outageKind])
		if r.outageStop != "" {
			s += r.outageStop
		} else {
			s += fmt.Sprintf("no write acknowledged for %s", r.outageGap.Round(time.Millisecond))
		}
	}
	return s
}

// simSettle bounds how long after the last write the world may take to
// settle.
const simSettle = time.Minute

// runSim runs the schedule of seed and checks it; with tracing, the
// returned lines tell what happened.
func runSim(seed uint64, cfg simConfig, tracing bool) (simResult, []string) {
	w := newSimWorld(seed, cfg)
	w.tracing = tracing
	w.plan()
	w.clients = []*simClient{{w: w, id: 0, target: func() int { return w.rw }}, {w: w, id: 1, target: func() int { return w.direct }}}
	for _, c := range w.clients {
		w.at(300*time.Millisecond, c.next)
	}
	settled := false
	for w.now < w.stopWrites+simSettle {
		w.step()
		if settled = w.settled(); settled {
			break
		}
	}
	r := simResult{seed: seed, cfg: cfg, linearizable: true, stuck: !settled, moves: w.op.moves, simulated: w.now,
		writes: len(w.ops), acked: len(w.acks)}
	r.splitAcks, r.split = splitAcks(w.acks, w.runs)
	if cfg.required && settled {
		h := w.nodes[simIndex(ptr.Deref(w.lease.Spec.HolderIdentity, ""))]
		r.holder = h.name
		r.linearizable, r.lost = checkDurable(w.ops, h.wal, w.now)
	}
	r.promises, r.pastTerm = w.promises, w.pastTerm
	if o := w.outage; o != nil && cfg.liveness {
		r.outageKind, r.outageRecorded = o.kind, w.outageRecorded
		if w.outageRecorded {
			r.outageStop, r.outageGap = outageLiveness(w.acks, w.stops, *o)
		}
	}
	return r, w.trace
}

// outageLiveness is the liveness check of an outage o of the API server
// with no other fault: the holder o struck never stops accepting writes
// while it lasts, and the longest stretch of it without an
// acknowledgement by that holder.
func outageLiveness(acks []simAck, stops []simStop, o simFault) (string, time.Duration) {
	stop := ""
	for _, s := range stops {
		if s.node == o.target && s.at >= o.at && s.at <= o.until {
			stop = fmt.Sprintf("%s stopped accepting writes at %.2fs, the outage lasting from %.2fs to %.2fs",
				simName(s.node), s.at.Seconds(), o.at.Seconds(), o.until.Seconds())
			break
		}
	}
	prev, gap := o.at, time.Duration(0)
	for _, a := range acks {
		if a.node != o.target || a.at < o.at || a.at > o.until {
			continue
		}
		gap, prev = max(gap, a.at-prev), a.at
	}
	return stop, max(gap, o.until-prev)
}

// splitAcks is check 1, no two writers: every acknowledgement of term i
// precedes the start of every primary of a later term.
func splitAcks(acks []simAck, runs []simRun) (int, string) {
	// The earliest start of a primary of each term, by term.
	var terms []simRun
	for _, r := range runs {
		i, found := slices.BinarySearchFunc(terms, r.term, func(a simRun, t int32) int { return int(a.term - t) })
		switch {
		case !found:
			terms = slices.Insert(terms, i, r)
		case r.start < terms[i].start:
			terms[i] = r
		}
	}
	n, first := 0, ""
	for _, a := range acks {
		for _, r := range terms {
			if r.term > a.term && r.start <= a.at {
				if n == 0 {
					first = fmt.Sprintf("%s acknowledged write %d at %.2fs as the primary of term %d; %s, the primary of term %d, started at %.2fs",
						simName(a.node), a.id, a.at.Seconds(), a.term, simName(r.node), r.term, r.start.Seconds())
				}
				n++
				break
			}
		}
	}
	return n, first
}

// simInput is a write of id, or the final read (of id, in a partition).
type simInput struct {
	read bool
	id   int
}

// simSetModel is a set of ids that writes add to and one final read
// returns: the read's Output is the []int of ids in the final WAL. A set
// is linearizable exactly when each element's history is, so it is
// checked per id, the read reduced to whether it holds the id.
var simSetModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		var read porcupine.Operation
		byID := map[int][]porcupine.Operation{}
		var ids []int
		for _, op := range history {
			in := op.Input.(simInput)
			if in.read {
				read = op
				continue
			}
			if _, ok := byID[in.id]; !ok {
				ids = append(ids, in.id)
			}
			byID[in.id] = append(byID[in.id], op)
		}
		read.Input = simInput{read: true}
		final := map[int]bool{}
		for _, id := range read.Output.([]int) {
			final[id] = true
			if _, ok := byID[id]; !ok {
				ids = append(ids, id) // read, never written
			}
		}
		parts := make([][]porcupine.Operation, 0, len(ids))
		for _, id := range ids {
			r := read
			r.Input, r.Output = simInput{read: true, id: id}, final[id]
			parts = append(parts, append(byID[id], r))
		}
		return parts
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		if !input.(simInput).read {
			return true, true
		}
		return output.(bool) == state.(bool), state
	},
	DescribeOperation: func(input, output any) string {
		if in := input.(simInput); !in.read {
			return fmt.Sprintf("write(%d)", in.id)
		}
		return fmt.Sprintf("read() -> %v", output)
	},
}

// checkDurable is check 2: the writes (acknowledged: from call to answer;
// unanswered: from call on, perhaps never) and a final read of wal, with
// porcupine; lost lists the acknowledged writes wal lacks, for the report.
func checkDurable(ops []*simOp, wal []simEntry, end time.Duration) (bool, []int) {
	final := make([]int, 0, len(wal))
	for _, e := range wal {
		if e.id > 0 {
			final = append(final, e.id)
		}
	}
	has := map[int]bool{}
	for _, id := range final {
		has[id] = true
	}
	var history []porcupine.Operation
	var lost []int
	for _, op := range ops {
		o := porcupine.Operation{ClientId: op.client, Input: simInput{id: op.id}, Call: int64(op.call), Metadata: op.acker}
		switch op.outcome {
		case outcomeRefused:
			continue
		case outcomeAck:
			o.Return = int64(op.ret)
			if !has[op.id] {
				lost = append(lost, op.id)
			}
		default:
			o.Return = math.MaxInt64
		}
		history = append(history, o)
	}
	history = append(history, porcupine.Operation{ClientId: 2, Input: simInput{read: true}, Output: final,
		Call: int64(end), Return: int64(end + simTick)})
	return porcupine.CheckOperations(simSetModel, history), lost
}

// commonPrefix is how many records a and b share.
func commonPrefix(a, b []simEntry) int {
	k := min(len(a), len(b))
	for k > 0 && a[k-1].id != b[k-1].id {
		k--
	}
	return k
}

// simSweep runs seeds from..to-1 of cfg on every CPU. Worlds are small
// and allocate fast: the collector runs less often meanwhile (a quarter
// of the CPU time otherwise).
func simSweep(cfg simConfig, from, to uint64) []simResult {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	out := make([]simResult, to-from)
	seeds := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for s := range seeds {
				out[s-from], _ = runSim(s, cfg, false)
			}
		})
	}
	for s := from; s < to; s++ {
		seeds <- s
	}
	close(seeds)
	wg.Wait()
	return out
}

func simJoin(lines []string) string { return strings.Join(lines, "\n") }

func simCPUs() int { return runtime.GOMAXPROCS(0) }
