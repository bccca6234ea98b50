package v1alpha1

import "time"

// DatabaseHA is spec.ha: the timings of the primary lease and of
// failover. The lease is the protocol that keeps two primaries from
// accepting writes at once (docs/high-availability.md): the primary
// renews it every second and stops serving before its term runs out,
// and the operator promotes another instance only once it has.
type DatabaseHA struct {
	// leaseDurationSeconds is the primary lease's term. A primary that
	// cannot renew it (its node lost the API server, its disk hangs)
	// stops serving writes two seconds before the term ends, and failover
	// starts when it ends, so an unplanned failover takes at least this
	// long; a clean stop (a deleted pod, a drain, a switchover) releases
	// the lease and does not wait for it. Longer terms ride out a slow
	// API server without a failover. Changing it restarts the instances
	// one at a time, as a restart-only setting does. Default 7.
	// +optional
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=60
	LeaseDurationSeconds *int32 `json:"leaseDurationSeconds,omitempty"`

	// failoverDelaySeconds is how long failover waits after the lease
	// expired before it promotes a replica. Meanwhile the old primary,
	// if it comes back (its node reaches the API server again), renews
	// its lease and serves on, with no failover. Writes stop for the
	// whole wait. A released lease (a clean stop) is not delayed.
	// Default 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=300
	FailoverDelaySeconds *int32 `json:"failoverDelaySeconds,omitempty"`
}

// LeaseDuration is spec.ha.leaseDurationSeconds, 0 when unset or the
// default (7 s, the instance manager's own: no flag, no restart).
func (db *Database) LeaseDuration() time.Duration {
	if db.Spec.HA == nil || db.Spec.HA.LeaseDurationSeconds == nil || *db.Spec.HA.LeaseDurationSeconds == 7 {
		return 0
	}
	return time.Duration(*db.Spec.HA.LeaseDurationSeconds) * time.Second
}

// FailoverDelay is spec.ha.failoverDelaySeconds, 0 when unset.
func (db *Database) FailoverDelay() time.Duration {
	if db.Spec.HA == nil || db.Spec.HA.FailoverDelaySeconds == nil {
		return 0
	}
	return time.Duration(*db.Spec.HA.FailoverDelaySeconds) * time.Second
}
