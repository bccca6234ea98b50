package ha

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Failover weighs the replicas after a release only on positions read
// after the primary stopped: read for the answer, or once any instance's
// last observation postdates the stop.
func TestPositionsSettled(t *testing.T) {
	replica := func(lsn string, readNow bool) instanceapi.Status {
		return instanceapi.Status{Role: instanceapi.RoleReplica, Phase: instanceapi.PhaseRunning, LSN: lsn, ReceivedLSN: lsn, PositionsReadNow: readNow}
	}
	cases := []struct {
		name    string
		answers map[string]instanceapi.Status
		since   time.Duration
		want    bool
	}{
		{"every replica read now", map[string]instanceapi.Status{"db-1": replica("0/3000060", true), "db-2": replica("0/3000000", true)}, 0, true},
		{"one from its last observation", map[string]instanceapi.Status{"db-1": replica("0/3000060", true), "db-2": replica("0/3000000", false)}, time.Second, false},
		{"the last observation postdates the stop", map[string]instanceapi.Status{"db-2": replica("0/3000000", false)}, settleWait, true},
		{"a replica with no positions is not weighed", map[string]instanceapi.Status{"db-1": replica("0/3000060", true), "db-2": {Role: instanceapi.RoleReplica}}, 0, true},
		{"the old primary's own answer does not count", map[string]instanceapi.Status{"db-0": {Role: instanceapi.RolePrimary, LSN: "0/3000060"}}, 0, true},
		{"nobody answered", nil, 0, true},
	}
	for _, c := range cases {
		if got := positionsSettled(c.answers, c.since); got != c.want {
			t.Errorf("%s: positionsSettled = %v, want %v", c.name, got, c.want)
		}
	}
}

// spec.ha.failoverDelaySeconds holds failover back after the lease
// expired, for its holder to come back; a released lease (a clean stop)
// and a lease expired for longer than the delay are not held.
func TestFailoverDelayHoldsAnExpiredLease(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	db := &v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{HA: &v1alpha1.DatabaseHA{FailoverDelaySeconds: ptr.To[int32](5)}}}
	lease := func(renewed *time.Time) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("db-0"), LeaseDurationSeconds: ptr.To[int32](7)}}
		if renewed != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
		}
		return l
	}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	a := &Actor{Clock: clocktesting.NewFakePassiveClock(now)}
	for _, c := range []struct {
		name    string
		lease   *coordinationv1.Lease
		requeue time.Duration
	}{
		{"expired 2 s ago", lease(at(-9 * time.Second)), 3*time.Second + 100*time.Millisecond},
		{"expired 6 s ago", lease(at(-13 * time.Second)), 0},
		{"released", lease(nil), 0},
	} {
		v := &View{Lease: c.lease}
		res, err := a.Failover(context.Background(), db, v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.RequeueAfter != c.requeue || (c.requeue > 0) != strings.Contains(v.FailoverWaiting, "spec.ha.failoverDelaySeconds") {
			t.Errorf("%s: requeue after %s, waiting %q; want a requeue after %s", c.name, res.RequeueAfter, v.FailoverWaiting, c.requeue)
		}
	}
}
