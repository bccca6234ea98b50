package instance_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A setting a replica may not run below its primary is lowered while the
// replica is cut off: the primary restarts with it first, as the operator
// does, then the replica restarts with it before it has replayed the
// primary's change. PostgreSQL would refuse to start it; it starts with the
// primary's old value instead, and once it has replayed the change it
// restarts by itself to run its own.
func TestReplicaBehindALoweredSettingStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	const name = "max_locks_per_transaction"
	high := map[string]string{name: "128"}
	low := withSettings(smallWALKeep, map[string]string{name: "64"})
	prim, repl, link := lt.linkedPairWith(high)

	link.partition()
	prim.setParameters(low)
	restartWith(t, prim, name, "64")
	prim.exec(ctx, "INSERT INTO items SELECT g, 'lowered' FROM generate_series(101, 120) g")
	repl.setParameters(low)
	restartWith(t, repl, name, "128")
	if s := repl.status(); s.Streaming {
		t.Fatal("the replica streams through a cut link")
	} else if !slices.Equal(s.RaisedSettings, []string{name}) {
		t.Errorf("started above its file: raisedSettings = %q, want [%s] (the operator must not count it done)", s.RaisedSettings, name)
	}

	healed := time.Now()
	link.heal()
	want := checksum(t, prim)
	eventually(t, time.Minute, func() bool {
		s := repl.status()
		return s.Phase == instanceapi.PhaseRunning && s.Streaming && s.StandbySettings[name] == "64" && !s.PendingRestart &&
			len(s.RaisedSettings) == 0 && checksum(t, repl) == want
	}, "the replica running its own lowered setting, streaming every row")
	t.Logf("the replica runs %s = 64 %s after the link came back", name, time.Since(healed).Round(100*time.Millisecond))
}

// A replica running its primary's higher value (a floor) is promoted: a
// primary's floors never replay away, so the promotion drops them from its
// configuration and postgres reports the setting pending a restart (which
// the operator's lowerOnPrimaryFirst waits for), and a restart runs its own.
// Before, its configuration kept the floor, nothing was pending, and the
// operator waited for ever.
func TestReplicaPromotedAboveItsSetting(t *testing.T) {
	t.Parallel()
	lt := newLeaseTest(t, "orders-0")
	const name = "max_locks_per_transaction"
	prim, repl, _ := lt.linkedPairWith(map[string]string{name: "128"})
	repl.setParameters(withSettings(smallWALKeep, map[string]string{name: "64"}))
	eventually(t, 30*time.Second, func() bool {
		return slices.Contains(repl.status().PendingRestartSettings, name)
	}, name+" pending a restart")
	if code := post(t, repl, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	eventually(t, time.Minute, func() bool {
		s := repl.status()
		return s.Phase == instanceapi.PhaseRunning && s.Streaming && slices.Equal(s.RaisedSettings, []string{name})
	}, "the replica streaming at its primary's "+name)

	prim.stop()
	lt.transfer("orders-1")
	if code := promote(t, repl, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	eventually(t, 30*time.Second, func() bool {
		s := repl.status()
		return s.Role == instanceapi.RolePrimary && s.StandbySettings[name] == "128" &&
			slices.Contains(s.PendingRestartSettings, name) && slices.Equal(s.RaisedSettings, []string{name})
	}, "the new primary still at 128, with "+name+" pending a restart and reported raised")
	if code := post(t, repl, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	eventually(t, time.Minute, func() bool {
		s := repl.status()
		return s.Phase == instanceapi.PhaseRunning && s.Role == instanceapi.RolePrimary && s.StandbySettings[name] == "64" &&
			!s.PendingRestart && len(s.RaisedSettings) == 0
	}, "the new primary running its own "+name+" after a restart in place")
}
