package ha

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A handed-over lease expires HandoverPatience after its acquisition, not
// at it; one never acquired never does.
func TestHandoverExpired(t *testing.T) {
	at := time.Unix(1e9, 0)
	acquired := metav1.NewMicroTime(at)
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{AcquireTime: &acquired}}
	if handoverExpired(l, at.Add(HandoverPatience)) {
		t.Error("expired at HandoverPatience itself")
	}
	if !handoverExpired(l, at.Add(HandoverPatience+time.Millisecond)) {
		t.Error("not expired after HandoverPatience")
	}
	if handoverExpired(&coordinationv1.Lease{}, at.Add(time.Hour)) {
		t.Error("a lease never acquired expired")
	}
}

// The holder waits to be promoted only while it answers as a replica.
func TestHolderIsReplica(t *testing.T) {
	v := &View{InstanceStatuses: []v1alpha1.InstanceStatus{
		{Name: "db-0", Role: "primary"}, {Name: "db-1", Role: "replica"}, {Name: "db-2", Role: "replica", Error: "timeout"},
	}}
	for holder, want := range map[string]bool{"db-0": false, "db-1": true, "db-2": false, "db-3": false} {
		if got := v.HolderIsReplica(holder); got != want {
			t.Errorf("HolderIsReplica(%s) = %v, want %v", holder, got, want)
		}
	}
}
