package instance

import (
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
