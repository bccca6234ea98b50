package ha

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func TestDecideFailover(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	expired := LeaseState{Holder: "db-0", Expires: now.Add(-time.Second), LSN: "0/5000000"}
	withSync := func(record string) LeaseState {
		l := expired
		l.Sync = ParseSync(record)
		return l
	}
	syncLease := withSync(`ANY 1 ("db-1", "db-2")`)
	replica := func(name, received string) v1alpha1.InstanceStatus {
		return v1alpha1.InstanceStatus{Name: name, Role: "replica", ReceivedLSN: received}
	}
	tests := []struct {
		name      string
		lease     LeaseState
		instances []v1alpha1.InstanceStatus
		want      string
		lag       int64
		waiting   string
	}{
		{"a valid lease moves nowhere", LeaseState{Holder: "db-0", Expires: now.Add(time.Second)},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000")}, "", 0, ""},
		{"the replica with the most WAL", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000"), replica("db-2", "0/5000000")}, "db-2", 0, ""},
		{"the lag against the lease's LSN is recorded", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000")}, "db-1", 0x1000, ""},
		{"released (never renewed) counts as expired", LeaseState{Holder: "db-0"},
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
		{"LSNs compare as numbers across the slash", LeaseState{Holder: "db-0"},
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
			d := DecideFailover(tt.lease, now, tt.instances)
			if d.Promote != tt.want || d.LagBytes != tt.lag {
				t.Fatalf("promote %q lag %d, want %q lag %d (%s)", d.Promote, d.LagBytes, tt.want, tt.lag, d.Waiting)
			}
			if !strings.Contains(d.Waiting, tt.waiting) || (tt.waiting == "" && d.Waiting != "") {
				t.Fatalf("waiting %q, want it to say %q", d.Waiting, tt.waiting)
			}
		})
	}
}
