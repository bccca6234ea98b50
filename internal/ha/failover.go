package ha

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// MaxFailoverLag is the most WAL a replica may lack, against the old
// primary's position at its last lease renewal, and still be promoted. A
// replica further behind is never promoted: the Database waits for the old
// primary instead, with a condition that says so.
const MaxFailoverLag = 16 << 20

// LeaseState is what the primary Lease says.
type LeaseState struct {
	Holder  string
	Expires time.Time // zero: released or never renewed
	LSN     string    // the holder's WAL position at its last renewal
	// Sync is the synchronous replication the holder recorded: one
	// setting, or the old and the new one while it changes. None:
	// asynchronous (the holder has recorded none yet).
	Sync []SyncSetting
	// Vouchers, when HasVouchers, are the instances whose promises the
	// holder needs to serve past its term (instanceapi.AnnotationVouchers):
	// only they may be promoted while it may still serve on them.
	Vouchers    []string
	HasVouchers bool
}

// SyncSetting is a synchronous_standby_names of the form ANY k (names);
// k 0 is asynchronous.
type SyncSetting struct {
	K     int
	Names []string
}

var anySync = regexp.MustCompile(`^ANY (\d+) \((.*)\)$`)

// ParseSync reads the lease's record (instanceapi.AnnotationSync). A value
// it cannot read counts as asynchronous: the lag bound then applies.
func ParseSync(record string) []SyncSetting {
	var out []SyncSetting
	for _, v := range strings.Split(record, instanceapi.SyncSeparator) {
		m := anySync.FindStringSubmatch(v)
		if m == nil {
			out = append(out, SyncSetting{})
			continue
		}
		k, _ := strconv.Atoi(m[1])
		var names []string
		for _, n := range strings.Split(m[2], ",") {
			names = append(names, strings.Trim(strings.TrimSpace(n), `"`))
		}
		out = append(out, SyncSetting{K: k, Names: names})
	}
	return out
}

// LeaseStateOf reads the state of l; a nil Lease is the zero state, held
// by nobody.
func LeaseStateOf(l *coordinationv1.Lease) LeaseState {
	var s LeaseState
	if l == nil {
		return s
	}
	if l.Spec.HolderIdentity != nil {
		s.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		s.Expires = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	}
	s.LSN = l.Annotations[instanceapi.AnnotationLeaseLSN]
	if rec, ok := l.Annotations[instanceapi.AnnotationSync]; ok {
		s.Sync = ParseSync(rec)
	}
	// A released lease (no renewal) binds nobody to promises: its holder
	// stopped serving before it released it.
	if v, ok := l.Annotations[instanceapi.AnnotationVouchers]; ok && l.Spec.RenewTime != nil {
		s.HasVouchers, s.Vouchers = true, ParseVouchers(v)
	}
	return s
}

// ParseVouchers reads instanceapi.AnnotationVouchers.
func ParseVouchers(v string) []string {
	var out []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// WithVouchedLSN is s with LSN raised to the newest WAL position the holder
// gave an instance when it asked for a promise (instanceapi.Status's
// VouchedFor and VouchedLSN): a holder that served on promises past its
// term wrote beyond the Lease's record, and a candidate's lag counts from
// what it wrote.
func (s LeaseState) WithVouchedLSN(statuses map[string]instanceapi.Status) LeaseState {
	want, ok := postgres.ParseLSN(s.LSN)
	for _, st := range statuses {
		if st.VouchedFor != s.Holder {
			continue
		}
		if l, ok2 := postgres.ParseLSN(st.VouchedLSN); ok2 && (!ok || l > want) {
			want, ok = l, true
			s.LSN = postgres.FormatLSN(l)
		}
	}
	return s
}

// Expired says nobody may serve writes under this lease now.
func (s LeaseState) Expired(now time.Time) bool { return s.Expires.IsZero() || !now.Before(s.Expires) }

// FailoverDecision is what to do about the primary lease.
type FailoverDecision struct {
	// Promote names the replica to move the lease to; empty means none.
	Promote string
	// LagBytes is how far Promote was behind the lease's LSN.
	LagBytes int64
	// Waiting explains why a lease that expired is not moved.
	Waiting string
	// Weighed lists each replica that answered with the WAL position it
	// was ranked by, for the record.
	Weighed []string
	// OnPromises, with no Promote, says the holder may serve on its
	// replicas' promises (it cannot renew the lease, but reaches them):
	// no failover is needed.
	OnPromises string
}

// DecideFailover picks the replica to promote once the lease expired: the
// one on the newest timeline with the most WAL (received, or replayed when
// nothing was received since it started) among those that answer. Timeline
// first: a replica still on a timeline an earlier failover left behind may
// report a higher LSN than one that follows the primary, but its WAL past
// the fork is not the primary's. It is pure: the reconciler gathers its
// inputs and carries out its answer.
//
// Asynchronous (the lease records no synchronous setting, or one of k 0):
// the replica must be within MaxFailoverLag of what the old primary last
// reported. Synchronous (every recorded setting ANY k of n names): enough
// of the named replicas must answer that one of them holds every
// acknowledged commit, n - k + 1 of them (R + W > N); the one with the most
// WAL then holds them all, and no lag bound applies, since what it lacks
// was never acknowledged.
func DecideFailover(lease LeaseState, now time.Time, instances []v1alpha1.InstanceStatus) FailoverDecision {
	if lease.Holder == "" || !lease.Expired(now) {
		return FailoverDecision{}
	}
	quorum := len(lease.Sync) > 0
	for _, s := range lease.Sync {
		quorum = quorum && s.K > 0
	}
	best, bestLSN, bestTimeline := "", uint64(0), int32(0)
	answering := map[string]bool{}
	var behind, weighed, vouching []string
	for _, in := range instances {
		if in.Name == lease.Holder || in.Error != "" || in.Role != string(instanceapi.RoleReplica) || in.FencedOnRequest {
			continue
		}
		if lease.HasVouchers && !slices.Contains(lease.Vouchers, in.Name) {
			continue // the holder may serve without its promise
		}
		if in.PromisedTo == lease.Holder && !lease.Expires.IsZero() {
			// It refuses promotion: the holder may serve on its promise.
			// (A holder that released the lease serves no more.)
			vouching = append(vouching, in.Name)
			continue
		}
		got, ok1 := postgres.ParseLSN(in.ReceivedLSN)
		replayed, ok2 := postgres.ParseLSN(in.LSN)
		if !ok1 && !ok2 {
			continue
		}
		got = max(got, replayed)
		answering[in.Name] = true
		weighed = append(weighed, fmt.Sprintf("%s at %s on timeline %d", in.Name, postgres.FormatLSN(got), in.Timeline))
		if want, ok := postgres.ParseLSN(lease.LSN); !quorum && ok && want > got && want-got > MaxFailoverLag {
			behind = append(behind, fmt.Sprintf("%s (%d bytes behind)", in.Name, want-got))
			continue
		}
		if best == "" || in.Timeline > bestTimeline || in.Timeline == bestTimeline && got > bestLSN {
			best, bestLSN, bestTimeline = in.Name, got, in.Timeline
		}
	}
	if len(vouching) > 0 {
		// The holder may serve on them still: nobody is promoted until
		// they end (within PromiseDuration of its last ask).
		return FailoverDecision{OnPromises: fmt.Sprintf("The primary %s cannot renew its lease; it serves on the promises of %s, "+
			"so none is promoted", lease.Holder, strings.Join(vouching, ", "))}
	}
	if quorum {
		for _, s := range lease.Sync {
			n := 0
			for _, name := range s.Names {
				if answering[name] {
					n++
				}
			}
			if need := len(s.Names) - s.K + 1; n < need {
				return FailoverDecision{Waiting: fmt.Sprintf("The primary %s lost its lease; it committed synchronously on %d of %s, "+
					"so %d of them must answer to be sure one holds every acknowledged commit, and %d do; none is promoted",
					lease.Holder, s.K, strings.Join(s.Names, ", "), need, n)}
			}
		}
	}
	if best == "" {
		why := "no replica answers"
		if len(behind) > 0 {
			why = fmt.Sprintf("every replica lags more than %d bytes: %s", MaxFailoverLag, strings.Join(behind, ", "))
		}
		return FailoverDecision{Waiting: fmt.Sprintf("The primary %s lost its lease; %s, so none is promoted", lease.Holder, why)}
	}
	d := FailoverDecision{Promote: best, Weighed: weighed}
	if want, ok := postgres.ParseLSN(lease.LSN); ok && want > bestLSN {
		d.LagBytes = int64(want - bestLSN)
	}
	return d
}
