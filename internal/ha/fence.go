package ha

import (
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// ServeUntil is when a holder must have stopped serving writes under a
// renewal made at renewed (the renewal's start on the holder's clock, or
// the renewTime another renewer wrote), for a lease of term d (0: the
// contract's LeaseDuration; a longer one counts as that). Past it, the
// operator may judge the lease expired and promote another instance,
// whatever the clocks' skew up to instanceapi.MaxClockSkew, provided the
// holder's fence takes effect within instanceapi.FenceLatency. Zero when
// renewed is zero (a released lease): such a holder may not serve at all
// until it renews.
func ServeUntil(renewed time.Time, d time.Duration) time.Time {
	if renewed.IsZero() {
		return time.Time{}
	}
	if d <= 0 || d > instanceapi.LeaseDuration {
		d = instanceapi.LeaseDuration
	}
	return renewed.Add(d - instanceapi.LeaseFenceMargin)
}
