package instance_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A postmaster killed from outside (the OOM killer, say) is started again
// by its instance manager, with crash recovery, without a container
// restart: the manager stays up, every committed row is there, and the
// primary keeps its lease. Three kills in a row.
func TestKilledPostgresRestartsInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	in := lt.instance(1)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")
	for round := 1; round <= 3; round++ {
		in.exec(ctx, fmt.Sprintf("INSERT INTO acks VALUES (%d)", round))
		postmaster := 0
		for pid, p := range procs() {
			if p.ppid == in.cmd.Process.Pid && p.comm == "postgres" {
				postmaster = pid
			}
		}
		if postmaster == 0 {
			t.Fatal("no postmaster below the instance manager")
		}
		killed := time.Now()
		if err := syscall.Kill(postmaster, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// It stays ready, so it stays the endpoint of -rw.
		watchReady := in.staysReady(fmt.Sprintf("round %d", round))
		eventually(t, 30*time.Second, func() bool {
			watchReady()
			c, err := in.connect(ctx, "shop", appPassword, "orders")
			if err != nil {
				return false
			}
			defer func() { _ = c.Close(ctx) }()
			_, err = c.Exec(ctx, fmt.Sprintf("INSERT INTO acks VALUES (%d)", 100+round))
			return err == nil
		}, "writes after the kill")
		t.Logf("round %d: writable again %s after the postmaster was killed", round, time.Since(killed).Round(time.Millisecond))
		for time.Since(killed) < 4*time.Second {
			watchReady()
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case err := <-in.exited:
			t.Fatalf("the instance manager exited: %v", err)
		default:
		}
	}
	if got := in.query(ctx, "SELECT count(*)::text FROM acks"); got != "6" {
		t.Fatalf("%s rows after three crashes, want 6", got)
	}

	// A restart asked through the API, as the operator does before it
	// lowers a setting replicas may not run lower than their primary: in
	// place, ready throughout, the lease kept.
	if got := in.status().StandbySettings["max_locks_per_transaction"]; got != "64" {
		t.Fatalf("status reports max_locks_per_transaction %q, want 64", got)
	}
	in.setParameters(map[string]string{"max_locks_per_transaction": "63"})
	eventually(t, 30*time.Second, func() bool {
		return slices.Contains(in.status().PendingRestartSettings, "max_locks_per_transaction")
	}, "the lowered setting pending a restart")
	if code := post(t, in, instanceapi.PathRestart, "", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("restart without a token = %d, want 401", code)
	}
	asked := time.Now()
	if code := post(t, in, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	watchReady := in.staysReady("the restart in place")
	eventually(t, 30*time.Second, func() bool {
		watchReady()
		s := in.status()
		return s.Phase == instanceapi.PhaseRunning && s.StandbySettings["max_locks_per_transaction"] == "63" && !s.PendingRestart
	}, "postgres running with the lowered setting")
	t.Logf("restarted in place with the lowered setting %s after the request", time.Since(asked).Round(time.Millisecond))
	in.exec(ctx, "INSERT INTO acks VALUES (200)")
	if l := lt.get(); *l.Spec.HolderIdentity != "orders-0" {
		t.Fatalf("the lease moved to %s", *l.Spec.HolderIdentity)
	}
}
