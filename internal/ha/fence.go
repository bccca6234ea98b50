package ha

import (
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// ServeUntil is when a holder must have stopped serving writes under a
// renewal made at renewed (the renewal's start on the holder's clock, or
// the renewTime another renewer wrote), for a lease of term d. Past it, the
// operator may judge the lease expired and promote another instance,
// whatever the clocks' skew up to instanceapi.MaxClockSkew, provided the
// holder's fence takes effect within instanceapi.FenceLatency. Zero when
// renewed is zero (a released lease): such a holder may not serve at all
// until it renews. d is the term the renewal recorded (0: the contract's
// LeaseDuration), which is also the term the operator judges expiry by;
// past instanceapi.MaxLeaseDuration it counts as that.
func ServeUntil(renewed time.Time, d time.Duration) time.Time {
	if renewed.IsZero() {
		return time.Time{}
	}
	switch {
	case d <= 0:
		d = instanceapi.LeaseDuration
	case d > instanceapi.MaxLeaseDuration:
		d = instanceapi.MaxLeaseDuration
	}
	return renewed.Add(d - instanceapi.LeaseFenceMargin)
}
