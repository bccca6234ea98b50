package ha

import (
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A holder that served on promises past its term wrote beyond the Lease's
// LSN record; the position it gave the instances it asked counts, so an
// asynchronous replica far behind it is not promoted on the stale record.
func TestFailoverLagCountsTheHoldersVouchedLSN(t *testing.T) {
	now := time.Now()
	lease := LeaseState{Holder: "db-0", Expires: now.Add(-time.Second), LSN: "0/3000000"}
	replicas := []v1alpha1.InstanceStatus{
		{Name: "db-1", Role: "replica", ReceivedLSN: "0/3100000", Timeline: 1},
		{Name: "db-2", Role: "replica", ReceivedLSN: "0/3000000", Timeline: 1},
	}
	statuses := map[string]instanceapi.Status{
		"db-1": {VouchedFor: "db-0", VouchedLSN: "0/9000000"},
		"db-2": {VouchedFor: "db-9", VouchedLSN: "0/F0000000"}, // another holder's: ignored
	}
	if d := DecideFailover(lease, now, replicas); d.Promote != "db-1" {
		t.Fatalf("on the Lease's record alone: %+v, want db-1 promoted", d)
	}
	lifted := lease.WithVouchedLSN(statuses)
	if lifted.LSN != "0/9000000" {
		t.Fatalf("lifted LSN %s, want 0/9000000", lifted.LSN)
	}
	if d := DecideFailover(lifted, now, replicas); d.Promote != "" || d.Waiting == "" {
		t.Fatalf("with the vouched LSN: %+v, want no promotion (every replica lags more than MaxFailoverLag)", d)
	}
	if got := lease.WithVouchedLSN(map[string]instanceapi.Status{"db-1": {VouchedFor: "db-0", VouchedLSN: "0/2000000"}}); got.LSN != lease.LSN {
		t.Errorf("an older vouched LSN lowered the record to %s", got.LSN)
	}
}
