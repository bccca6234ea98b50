package database

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

// Exported for the envtest suite, which runs as package database_test.
var (
	LabelRoles     = (*Reconciler).labelRoles
	LabelledFenced = labelledFenced
	LabelRole      = labelRole
)

// RoleFenced is the role label of a pod fenced on request.
const RoleFenced = roleFenced

// AwaitRelease runs failover's wait for holder's release, among pods, and
// returns the time waited and the lease it ended with.
func AwaitRelease(ctx context.Context, r *Reconciler, db *v1alpha1.Database, lease *coordinationv1.Lease, pods []corev1.Pod, holder string) (time.Duration, *coordinationv1.Lease) {
	v := &ha.View{Lease: lease, Pods: pods}
	waited := r.actor().AwaitRelease(ctx, db, v, holder)
	return waited, v.Lease
}
