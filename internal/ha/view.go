package ha

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// View is what the Database controller observed of one Database that the
// HA phases act on, and what they change of it for the phases after them:
// the pods, the instances' answers, the primary Lease and its holder.
type View struct {
	// Started is when the reconcile began, on the real clock (for the log).
	Started time.Time
	// Written is the Database as the API server has it (see announce).
	Written *v1alpha1.Database
	// Pods are the Database's pods, by ordinal.
	Pods []corev1.Pod
	// InstanceStatuses are the instance managers' answers as the status
	// shows them; Instances the answers themselves, by pod.
	InstanceStatuses []v1alpha1.InstanceStatus
	Instances        map[string]instanceapi.Status
	// Lease is the primary Lease; Primary is its holder.
	Lease   *coordinationv1.Lease
	Primary string
	// Replication is what the operator asks of the instances (its
	// synchronous replication and its instances); WantInstances how many
	// the spec wants, and ShrinkHeld that a scale-down waits for the
	// primary to move to an instance that stays.
	Replication   instanceapi.Replication
	WantInstances int32
	ShrinkHeld    bool

	// FailoverWaiting and SwitchoverWaiting say why a failover or a
	// switchover waits; ServingOnPromises why an expired lease is not
	// moved: its holder serves on its replicas' promises
	// (FailoverDecision.OnPromises).
	FailoverWaiting, SwitchoverWaiting, ServingOnPromises string
	// HandedOver: a switchover moved the primary in this reconcile, so what
	// was observed (lease, roles, readiness) is stale; nothing else acts on
	// it.
	HandedOver bool
}

// PodNamed is the pod called name, or nil.
func (v *View) PodNamed(name string) *corev1.Pod {
	for i := range v.Pods {
		if v.Pods[i].Name == name {
			return &v.Pods[i]
		}
	}
	return nil
}

// PodIP is the address of the named pod's instance manager ("" if it has
// none).
func (v *View) PodIP(pod string) string {
	if p := v.PodNamed(pod); p != nil {
		return p.Status.PodIP
	}
	return ""
}

// HolderIsReplica says the lease names an instance that still reports
// itself a replica, so it waits to be promoted.
func (v *View) HolderIsReplica(holder string) bool {
	for _, s := range v.InstanceStatuses {
		if s.Name == holder {
			return s.Error == "" && s.Role == string(instanceapi.RoleReplica) && !s.FencedOnRequest
		}
	}
	return false
}
