package instance_test

import (
	"context"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Fencing on request, on real PostgreSQL and a real API server: a
// primary told to fence stops serving at once and gives its lease up (so
// failover may promote another, and the operator still asks it), its
// manager stays up and says so, a restart keeps the fence (the data
// directory holds it), and lifting it starts postgres again.
func TestFenceOnRequestKeepsPostgresDownUntilLifted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	in := lt.instance(0)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY)")

	fence := func(on bool) {
		t.Helper()
		if code := post(t, in, instanceapi.PathFence, apiToken, instanceapi.FenceRequest{Fenced: on}, nil); code != 200 {
			t.Fatalf("fence %t: HTTP %d", on, code)
		}
	}
	if code := post(t, in, instanceapi.PathFence, "wrong-token", instanceapi.FenceRequest{Fenced: true}, nil); code != 401 {
		t.Fatalf("a fence without the token: HTTP %d", code)
	}
	fence(true)
	fencedAt := time.Now()
	eventually(t, 10*time.Second, func() bool {
		return in.execWithin(ctx, 2*time.Second, "INSERT INTO items VALUES (1)") != nil
	}, "the fenced primary refusing writes")
	t.Logf("writes stopped %s after the fence", time.Since(fencedAt).Round(10*time.Millisecond))
	eventually(t, 10*time.Second, func() bool {
		s := in.status()
		return s.FencedOnRequest && s.Phase == instanceapi.PhaseFenced && lt.get().Spec.RenewTime == nil
	}, "the fence in the status, and the lease released")
	// Ready in the kubelet's sense (the operator's "fenced" label keeps
	// the pod out of the Services): a fenced pod that never turned ready
	// would hold up the StatefulSet's higher ordinals.
	if !in.readyz() {
		t.Fatal("the fenced instance is not ready")
	}

	// A restart of the manager keeps the fence.
	in.stop()
	in.start("orders-0")
	eventually(t, 30*time.Second, func() bool {
		s, ok := in.tryStatus()
		return ok && s.FencedOnRequest && s.Phase == instanceapi.PhaseFenced
	}, "the fence kept across a restart")
	if err := in.execWithin(ctx, 2*time.Second, "INSERT INTO items VALUES (2)"); err == nil {
		t.Fatal("a write after the restart of a fenced instance")
	}

	fence(false)
	in.waitReady(60 * time.Second)
	in.exec(ctx, "INSERT INTO items VALUES (3)")
	if s := in.status(); s.FencedOnRequest {
		t.Fatalf("still fenced after the fence was lifted: %+v", s)
	}
}

// A fenced replica is never promoted: the lease moved to it (as a
// failover that read an old status would) finds it refusing, and it gives
// the lease up at once so that failover can move it on.
func TestFencedReplicaRefusesPromotion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	prim, repl := lt.pair()
	prim.start("orders-0")
	prim.waitReady(90 * time.Second)
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	prim.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY)")

	if code := post(t, repl, instanceapi.PathFence, apiToken, instanceapi.FenceRequest{Fenced: true}, nil); code != 200 {
		t.Fatalf("fence: HTTP %d", code)
	}
	eventually(t, 20*time.Second, func() bool { s := repl.status(); return s.FencedOnRequest && s.Phase == instanceapi.PhaseFenced },
		"the replica fenced")
	lt.transfer("orders-1")
	if code := promote(t, repl, apiToken); code != 409 {
		t.Fatalf("promoting a fenced replica: HTTP %d, want 409", code)
	}
	eventually(t, 20*time.Second, func() bool { return lt.get().Spec.RenewTime == nil }, "the fenced replica giving the lease it was moved up")
	if err := repl.execWithin(ctx, 2*time.Second, "INSERT INTO items VALUES (1)"); err == nil {
		t.Fatal("the fenced replica took a write")
	}
}
