package instance

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A replica that was streaming stays ready for streamLossGrace after it
// stops (a failover's moment, when the next primary must stay in -rw);
// one that never streamed since it started gets no grace.
func TestStreamJustLost(t *testing.T) {
	t.Parallel()
	m := &Manager{}
	observe := func(streaming bool) {
		m.mu.Lock()
		m.noteStreaming(streaming)
		m.mu.Unlock()
	}
	observe(false)
	if m.streamJustLost() {
		t.Fatal("a replica that never streamed is given the grace")
	}
	observe(true)
	observe(false)
	if !m.streamJustLost() {
		t.Fatal("a replica that just stopped streaming is not given the grace")
	}
	observe(false)
	if !m.streamJustLost() {
		t.Fatal("a second observation without streaming ended the grace early")
	}
	m.mu.Lock()
	m.streamLost = m.streamLost.Add(-streamLossGrace)
	m.notStreamingSince = m.streamLost
	m.mu.Unlock()
	if m.streamJustLost() {
		t.Fatalf("the grace outlasted %s", streamLossGrace)
	}
	// Streaming again, then lost again: a new grace.
	observe(true)
	observe(false)
	if !m.streamJustLost() {
		t.Fatal("a second loss is not given the grace")
	}
	// A restart forgets it.
	m.setPhase(instanceapi.PhaseStarting, "")
	observe(false)
	if m.streamJustLost() {
		t.Fatal("the grace survived a restart")
	}
}

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

// A promotion that waited for no WAL skips its second lease read only while
// the first is recent and the lease well within its term.
func TestStillNamed(t *testing.T) {
	t.Parallel()
	now := time.Now()
	cases := []struct {
		name          string
		renewed, read time.Time
		want          bool
	}{
		{"just moved, just read", now.Add(-100 * time.Millisecond), now.Add(-50 * time.Millisecond), true},
		{"released: no renewal to count on", time.Time{}, now, false},
		{"read too long ago", now.Add(-time.Second), now.Add(-reread - time.Millisecond), false},
		{"read exactly reread ago", now.Add(-time.Second), now.Add(-reread), true},
		{"near the end of its term", now.Add(-(instanceapi.LeaseDuration - instanceapi.LeaseFenceMargin)), now, false},
		{"renewed in the future (clock skew) and just read", now.Add(time.Second), now, true},
	}
	for _, c := range cases {
		if got := stillNamed(LeaseView{Holder: "orders-1", Renewed: c.renewed, Duration: instanceapi.LeaseDuration}, c.read, now); got != c.want {
			t.Errorf("%s: stillNamed = %v, want %v", c.name, got, c.want)
		}
	}
	// A lease made anew records no term until its holder renews.
	if stillNamed(LeaseView{Holder: "orders-1", Renewed: now}, now, now) {
		t.Error("stillNamed counts on a lease that records no term")
	}
	// A shorter term than the contract's counts as it is.
	if stillNamed(LeaseView{Holder: "orders-1", Renewed: now.Add(-time.Second), Duration: 3 * time.Second}, now, now) {
		t.Error("stillNamed counts on a 3 s term renewed 1 s ago, past its fence margin")
	}
}
