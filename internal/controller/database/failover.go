package database

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// MaxFailoverLag is the most WAL a replica may lack, against the old
// primary's position at its last lease renewal, and still be promoted. A
// replica further behind is never promoted: the Database waits for the old
// primary instead, with a condition that says so.
const MaxFailoverLag = 16 << 20

// leaseState is what the primary Lease says.
type leaseState struct {
	holder  string
	expires time.Time // zero: released or never renewed
	lsn     string    // the holder's WAL position at its last renewal
}

func leaseStateOf(l *coordinationv1.Lease) leaseState {
	var s leaseState
	if l == nil {
		return s
	}
	if l.Spec.HolderIdentity != nil {
		s.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		s.expires = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	}
	s.lsn = l.Annotations[instanceapi.AnnotationLeaseLSN]
	return s
}

// expired: nobody may serve writes under this lease now.
func (s leaseState) expired(now time.Time) bool { return s.expires.IsZero() || !now.Before(s.expires) }

// failoverDecision is what to do about the primary lease.
type failoverDecision struct {
	// promote names the replica to move the lease to; empty means none.
	promote string
	// lagBytes is how far promote was behind the lease's LSN.
	lagBytes int64
	// waiting explains why a lease that expired is not moved.
	waiting string
}

// decideFailover picks the replica to promote once the lease expired: the
// one that received the most WAL among those that answer. It is pure: the
// reconciler gathers its inputs and carries out its answer.
//
// quorum 0 (asynchronous, or synchronous with preferred durability): the
// replica must be within MaxFailoverLag of what the old primary last
// reported. quorum q > 0 (synchronous, required): at least q replicas must
// answer, enough that one of them holds every acknowledged commit; the one
// with the most WAL then holds them all, and no lag bound applies, since
// what it lacks was never acknowledged.
func decideFailover(lease leaseState, now time.Time, instances []v1alpha1.InstanceStatus, quorum int) failoverDecision {
	if lease.holder == "" || !lease.expired(now) {
		return failoverDecision{}
	}
	best, bestLSN, answering := "", uint64(0), 0
	var behind []string
	for _, in := range instances {
		if in.Name == lease.holder || in.Error != "" || in.Role != string(instanceapi.RoleReplica) {
			continue
		}
		got, ok := parseLSN(in.ReceivedLSN)
		if !ok {
			continue
		}
		answering++
		if want, ok := parseLSN(lease.lsn); quorum == 0 && ok && want > got && want-got > MaxFailoverLag {
			behind = append(behind, fmt.Sprintf("%s (%d bytes behind)", in.Name, want-got))
			continue
		}
		if best == "" || got > bestLSN {
			best, bestLSN = in.Name, got
		}
	}
	if quorum > 0 && answering < quorum {
		return failoverDecision{waiting: fmt.Sprintf("The primary %s lost its lease; synchronous replication with required durability "+
			"needs %d replicas to answer to be sure one holds every acknowledged commit, and %d do, so none is promoted",
			lease.holder, quorum, answering)}
	}
	if best == "" {
		why := "no replica answers"
		if len(behind) > 0 {
			why = fmt.Sprintf("every replica lags more than %d bytes: %s", MaxFailoverLag, strings.Join(behind, ", "))
		}
		return failoverDecision{waiting: fmt.Sprintf("The primary %s lost its lease; %s, so none is promoted", lease.holder, why)}
	}
	d := failoverDecision{promote: best}
	if want, ok := parseLSN(lease.lsn); ok && want > bestLSN {
		d.lagBytes = int64(want - bestLSN)
	}
	return d
}

// parseLSN reads PostgreSQL's "X/Y" WAL position.
func parseLSN(s string) (uint64, bool) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return h<<32 | l, true
}
