package database

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

// ensurePrimaryLease creates the primary Lease once, and lets the instance
// managers read and renew it. The operator never applies the Lease: its
// holder is the one fact failover changes.
func (r *Reconciler) ensurePrimaryLease(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[corev1.ServiceAccount](db.Namespace, instanceAccountName(db)),
		instanceServiceAccount(db), corev1ac.ExtractServiceAccount, "ServiceAccount"); err != nil {
		return err
	}
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[rbacv1.Role](db.Namespace, instanceAccountName(db)),
		instanceRole(db), rbacv1ac.ExtractRole, "Role"); err != nil {
		return err
	}
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[rbacv1.RoleBinding](db.Namespace, instanceAccountName(db)),
		instanceRoleBinding(db), rbacv1ac.ExtractRoleBinding, "RoleBinding"); err != nil {
		return err
	}
	l := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}
	err := r.Client.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		// Not in the cache yet, or really missing: the API server decides.
		if err = r.APIReader.Get(ctx, key, l); apierrors.IsNotFound(err) {
			l = primaryLease(db)
			if err := controllerutil.SetControllerReference(db, l, r.Client.Scheme()); err != nil {
				return err
			}
			if err := r.Client.Create(ctx, l); err != nil {
				return fmt.Errorf("failed to create Lease %s: %w", l.Name, err)
			}
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get Lease %s: %w", key.Name, err)
	}
	obs.lease = l
	obs.primary = ha.LeaseStateOf(l).Holder
	return nil
}

// HandoverPatience is how long a switchover's target keeps a lease it has
// not been promoted with (it lacks the old primary's last WAL, say) before
// failover chooses again among all replicas.
const HandoverPatience = 2 * time.Minute

// handoverExpired: the lease was handed over more than HandoverPatience ago.
func handoverExpired(l *coordinationv1.Lease, now time.Time) bool {
	return l.Spec.AcquireTime != nil && now.Sub(l.Spec.AcquireTime.Time) > HandoverPatience
}

// extendLease renews the lease for its holder, on the operator's side,
// with the resourceVersion read.
func (r *Reconciler) extendLease(ctx context.Context, obs *observation) error {
	l := obs.lease.DeepCopy()
	t := metav1.NewMicroTime(r.Clock.Now())
	l.Spec.RenewTime = &t
	if err := r.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("failed to extend Lease %s for %s: %w", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), err)
	}
	obs.lease = l
	return nil
}

// holderIsReplica: the lease names an instance that still reports itself a
// replica, so it waits to be promoted.
func holderIsReplica(obs *observation, holder string) bool {
	for _, s := range obs.instanceStatuses {
		if s.Name == holder {
			return s.Error == "" && s.Role == "replica"
		}
	}
	return false
}
