package database

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func TestDecideFailover(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	expired := leaseState{holder: "db-0", expires: now.Add(-time.Second), lsn: "0/5000000"}
	withSync := func(record string) leaseState {
		l := expired
		l.sync = parseSync(record)
		return l
	}
	syncLease := withSync(`ANY 1 ("db-1", "db-2")`)
	replica := func(name, received string) v1alpha1.InstanceStatus {
		return v1alpha1.InstanceStatus{Name: name, Role: "replica", ReceivedLSN: received}
	}
	tests := []struct {
		name      string
		lease     leaseState
		instances []v1alpha1.InstanceStatus
		want      string
		lag       int64
		waiting   string
	}{
		{"a valid lease moves nowhere", leaseState{holder: "db-0", expires: now.Add(time.Second)},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000")}, "", 0, ""},
		{"the replica with the most WAL", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000"), replica("db-2", "0/5000000")}, "db-2", 0, ""},
		{"the lag against the lease's LSN is recorded", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000")}, "db-1", 0x1000, ""},
		{"released (never renewed) counts as expired", leaseState{holder: "db-0"},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1")}, "db-1", 0, ""},
		{"a replica past the bound is never promoted", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "", 0, "lags more than"},
		{"the old holder, primaries and silent instances are no candidates", expired,
			[]v1alpha1.InstanceStatus{replica("db-0", "0/5000000"), {Name: "db-1", Role: "primary", ReceivedLSN: "0/5000000"},
				{Name: "db-2", Role: "replica", Error: "the instance manager did not answer"}}, "", 0, "no replica answers"},
		{"a replica that received nothing since it started ranks by what it replayed", expired,
			[]v1alpha1.InstanceStatus{{Name: "db-1", Role: "replica", LSN: "0/4FFF000"}, replica("db-2", "0/4000000")}, "db-1", 0x1000, ""},
		{"the newest timeline wins over a higher LSN on a timeline a failover left behind", expired,
			[]v1alpha1.InstanceStatus{{Name: "db-1", Role: "replica", ReceivedLSN: "0/4FFF000", Timeline: 3},
				{Name: "db-2", Role: "replica", ReceivedLSN: "0/5000000", Timeline: 2}}, "db-1", 0x1000, ""},
		{"LSNs compare as numbers across the slash", leaseState{holder: "db-0"},
			[]v1alpha1.InstanceStatus{replica("db-1", "1/0"), replica("db-2", "0/FFFFFFFF")}, "db-1", 0, ""},
		// Synchronous: 3 instances, each commit flushed on ANY 1 of the 2
		// replicas, so both must answer.
		{"sync: a quorum of replicas answers, the most WAL wins", syncLease,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000"), replica("db-2", "0/4FFFF00")}, "db-2", 0x100, ""},
		{"sync: one replica of a quorum of two may lack an acknowledged commit", syncLease,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000"), {Name: "db-2", Role: "replica", Error: "the instance manager did not answer"}},
			"", 0, "so 2 of them must answer"},
		{"sync: no lag bound, what the best lacks was never acknowledged", withSync(`ANY 1 ("db-1")`),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "db-1", 0x4000000, ""},
		{"sync: an instance outside the named standbys does not count", syncLease,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000"), replica("db-3", "0/5000000")}, "", 0, "and 1 do"},
		{"sync: while the setting changes both must hold", withSync(`ANY 2 ("db-1", "db-2")|ANY 1 ("db-1", "db-2")`),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4000000")}, "", 0, "so 2 of them must answer"},
		{"sync: a change from asynchronous keeps the lag bound", withSync(`|ANY 1 ("db-1", "db-2")`),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "", 0, "lags more than"},
		{"recorded asynchronous keeps the lag bound", withSync(""),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "", 0, "lags more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideFailover(tt.lease, now, tt.instances)
			if d.promote != tt.want || d.lagBytes != tt.lag {
				t.Fatalf("promote %q lag %d, want %q lag %d (%s)", d.promote, d.lagBytes, tt.want, tt.lag, d.waiting)
			}
			if !strings.Contains(d.waiting, tt.waiting) || (tt.waiting == "" && d.waiting != "") {
				t.Fatalf("waiting %q, want it to say %q", d.waiting, tt.waiting)
			}
		})
	}
}

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
