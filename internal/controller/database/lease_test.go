package database

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Failover reconciles on a new holder and on a release, not on the
// renewals every second.
func TestLeaseChangedLetsThroughHolderAndRelease(t *testing.T) {
	renewed := metav1.NewMicroTime(time.Unix(1e9, 0))
	lease := func(holder string, renew *metav1.MicroTime) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: renew}}
	}
	later := metav1.NewMicroTime(renewed.Add(time.Second))
	for _, c := range []struct {
		name     string
		old, new *coordinationv1.Lease
		want     bool
	}{
		{"a renewal", lease("db-0", &renewed), lease("db-0", &later), false},
		{"a new holder", lease("db-0", &renewed), lease("db-1", &later), true},
		{"a release", lease("db-0", &renewed), lease("db-0", nil), true},
	} {
		if got := leaseChanged.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
