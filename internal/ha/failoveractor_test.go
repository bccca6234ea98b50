package ha

import (
	"testing"
	"time"

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
