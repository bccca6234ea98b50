package instance

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Only a lease handed on promotes by itself: an update of the same lease
// that counted a transition and renewed it. A listed lease, or one deleted
// and made anew (which names its first holder, unrenewed), does not.
func TestHandedOn(t *testing.T) {
	t.Parallel()
	lease := func(uid string, transitions int32, renewed bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{UID: k8stypes.UID(uid)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-1"), LeaseTransitions: ptr.To(transitions)}}
		if renewed {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		}
		return l
	}
	for _, c := range []struct {
		name      string
		prev, now *coordinationv1.Lease
		want      bool
	}{
		{"a failover's move", lease("a", 3, true), lease("a", 4, true), true},
		{"a renewal", lease("a", 4, true), lease("a", 4, true), false},
		{"listed at start", nil, lease("a", 4, true), false},
		{"deleted and made anew", lease("a", 4, true), lease("b", 5, true), false},
		{"a release", lease("a", 3, true), lease("a", 4, false), false},
	} {
		if got := handedOn(c.prev, c.now); got != c.want {
			t.Errorf("%s: handedOn = %v, want %v", c.name, got, c.want)
		}
	}
}
