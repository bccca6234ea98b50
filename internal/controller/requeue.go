package controller

import "time"

// Soonest is the earliest of requeue delays, where 0 means none: the one
// way a reconcile's phases, each with a delay of its own, merge into the
// delay the reconcile returns.
func Soonest(delays ...time.Duration) time.Duration {
	var out time.Duration
	for _, d := range delays {
		if d > 0 && (out == 0 || d < out) {
			out = d
		}
	}
	return out
}
