package database

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

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
	obs.Lease = l
	obs.Primary = ha.LeaseStateOf(l).Holder
	return nil
}

// leaseChanged lets through the Lease events failover acts on: a new
// holder, and a release (renewTime cleared). Renewals, once a second, are
// not events to reconcile on.
var leaseChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*coordinationv1.Lease)
		n, ok2 := e.ObjectNew.(*coordinationv1.Lease)
		if !ok1 || !ok2 {
			return true
		}
		return ptr.Deref(o.Spec.HolderIdentity, "") != ptr.Deref(n.Spec.HolderIdentity, "") ||
			(o.Spec.RenewTime == nil) != (n.Spec.RenewTime == nil)
	},
}
