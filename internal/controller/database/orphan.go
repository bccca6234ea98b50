package database

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// orphanedKinds are the children deletionPolicy Orphan releases: all that
// a running Database needs (the instances' StatefulSet and what they read,
// the identity they renew the Lease with, the pools). The Lease itself is
// released by update (orphan). Jobs and DatabaseBackups go with the
// Database.
var orphanedKinds = []client.Object{&appsv1.StatefulSet{}, &appsv1.Deployment{}, &corev1.Service{}, &corev1.ConfigMap{},
	&corev1.Secret{}, &policyv1.PodDisruptionBudget{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}}

// orphan disconnects db from daytwo: its children lose db's owner
// reference, so garbage collection leaves them, and PostgreSQL runs on
// without an operator.
func (r *Reconciler) orphan(ctx context.Context, db *v1alpha1.Database) error {
	if slices.Contains(db.Finalizers, metav1.FinalizerDeleteDependents) {
		// Foreground deletion: the garbage collector deletes the children
		// while this runs, whatever it releases in time.
		controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "ForegroundDeletion", "Delete",
			"deletionPolicy Orphan, but the Database is deleted with foreground propagation: the garbage collector may delete "+
				"its instances before daytwo releases them. Delete with --cascade=background (Argo CD: PrunePropagationPolicy=background)")
	}
	released := 0
	for _, kind := range orphanedKinds {
		gvk, err := r.Client.GroupVersionKindFor(kind)
		if err != nil {
			return err
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.APIReader.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
			return fmt.Errorf("failed to list %ss: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if !metav1.IsControlledBy(obj, db) {
				continue
			}
			base := obj.DeepCopy()
			obj.OwnerReferences = slices.DeleteFunc(obj.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == db.UID })
			if err := r.Client.Patch(ctx, obj, client.MergeFrom(base)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("failed to release %s %s: %w", gvk.Kind, obj.Name, err)
			}
			released++
		}
	}
	// The Lease by update: the instances' renewals race this write, and a
	// conflict is retried by the next reconcile.
	lease := &coordinationv1.Lease{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, lease); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to get the primary Lease: %w", err)
	} else if err == nil && metav1.IsControlledBy(lease, db) {
		lease.OwnerReferences = slices.DeleteFunc(lease.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == db.UID })
		if err := r.Client.Update(ctx, lease); err != nil {
			return fmt.Errorf("failed to release the primary Lease: %w", err)
		}
		released++
	}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "Orphaned", "Delete",
		"deletionPolicy Orphan: released %d objects; PostgreSQL runs on without daytwo (a Database named %s with the annotation %s: \"true\" takes it back)",
		released, db.Name, v1alpha1.AnnotationAdopt)
	return nil
}
