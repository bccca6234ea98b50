package database_test

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/controller/database"
)

// A primary whose pod is being deleted releases its lease once postgres
// stops: failover waits for that within the reconcile, reads the released
// lease, and gives up once the deletion is releaseWait (3 s) old. Any other
// primary is not waited for.
func TestFailoverWaitsForATerminatingPrimarysRelease(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "db")
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-primary", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("db-0"), RenewTime: &now, AcquireTime: &now, LeaseDurationSeconds: ptr.To[int32](60)}}
	create(t, lease)
	// deletedAt is db-0 deleted at t with a 30 s grace period (the
	// deletion timestamp is the end of it).
	deletedAt := func(at time.Time) []corev1.Pod {
		end := metav1.NewTime(at.Add(30 * time.Second))
		return []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: ns, DeletionTimestamp: &end, DeletionGracePeriodSeconds: ptr.To[int64](30)}},
			{ObjectMeta: metav1.ObjectMeta{Name: "db-1", Namespace: ns}},
		}
	}
	r := &database.Reconciler{Client: env.Client, Clock: clock.RealClock{}}

	start := time.Now()
	running := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "db-1"}}}
	if waited, l := database.AwaitRelease(ctx, r, db, lease, running, "db-0"); waited != 0 || l != lease {
		t.Fatalf("waited %s for a primary that is not being deleted", waited)
	}
	if waited, _ := database.AwaitRelease(ctx, r, db, lease, deletedAt(time.Now())[:1], "db-0"); waited != 0 {
		t.Fatalf("waited %s for the only instance", waited)
	}
	if waited, _ := database.AwaitRelease(ctx, r, db, lease, deletedAt(time.Now().Add(-5*time.Second)), "db-0"); waited != 0 {
		t.Fatalf("waited %s for a release 5 s after the deletion", waited)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("the cases that must not wait took %s", time.Since(start))
	}

	start = time.Now()
	if waited, l := database.AwaitRelease(ctx, r, db, lease, deletedAt(start.Add(-time.Second)), "db-0"); waited != 0 || l.Spec.RenewTime == nil {
		t.Fatalf("a lease never released: waited %s, renewTime %v", waited, l.Spec.RenewTime)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up on the release %s after a deletion 1 s old, want about 2 s", took)
	}

	type release struct {
		at  time.Time
		err error
	}
	released := make(chan release, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), l); err != nil {
				return err
			}
			l.Spec.RenewTime = nil
			return env.Client.Update(ctx, l)
		})
		released <- release{time.Now(), err}
	}()
	start = time.Now()
	waited, l := database.AwaitRelease(ctx, r, db, lease, deletedAt(start), "db-0")
	rel := <-released
	if rel.err != nil {
		t.Fatal(rel.err)
	}
	if waited < 300*time.Millisecond || l.Spec.RenewTime != nil {
		t.Fatalf("waited %s, renewTime %v: want the released lease after at least 300 ms", waited, l.Spec.RenewTime)
	}
	if lag := start.Add(waited).Sub(rel.at); lag > 500*time.Millisecond {
		t.Fatalf("saw the release %s after it was written", lag)
	}
}
