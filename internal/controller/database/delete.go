package database

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
)

// reconcileDelete carries out deletionPolicy on what garbage collection
// would not handle as asked, then lets the Database go. The StatefulSet,
// Services and ConfigMap always go with it through owner references.
func (r *Reconciler) reconcileDelete(ctx context.Context, db *v1alpha1.Database) error {
	db.Status.Phase = v1alpha1.DatabasePhaseDeleting
	if !controllerutil.ContainsFinalizer(db, cleanupFinalizer) {
		return nil
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, pvcs, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return fmt.Errorf("failed to list volumes: %w", err)
	}
	switch db.Spec.DeletionPolicy {
	case v1alpha1.DatabaseDeletionSnapshot:
		if len(pvcs.Items) > 0 {
			return r.holdForSnapshot(db)
		}
	case v1alpha1.DatabaseDeletionDelete:
		if err := r.deleteVolumes(ctx, db, pvcs.Items); err != nil {
			return err
		}
	default:
		if err := r.retain(ctx, db, pvcs.Items); err != nil {
			return err
		}
	}
	base := db.DeepCopy()
	controllerutil.RemoveFinalizer(db, cleanupFinalizer)
	if err := r.Client.Patch(ctx, db, client.MergeFrom(base)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to remove the finalizer: %w", err)
	}
	return nil
}

// holdForSnapshot keeps the Database, saying so in a condition and an
// Event, until a final backup can be taken or the policy is changed.
func (r *Reconciler) holdForSnapshot(db *v1alpha1.Database) error {
	msg := "deletionPolicy Snapshot waits for a final backup, which this daytwo build cannot take yet; " +
		"set spec.deletionPolicy to Retain or Delete to finish the deletion"
	if c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonSnapshotUnavailable {
		r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, v1alpha1.ReasonSnapshotUnavailable, "Delete", msg)
	}
	conditions.Set(&db.Status.Conditions, db.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse,
		v1alpha1.ReasonSnapshotUnavailable, msg)
	return nil
}

func (r *Reconciler) deleteVolumes(ctx context.Context, db *v1alpha1.Database, pvcs []corev1.PersistentVolumeClaim) error {
	var names []string
	for i := range pvcs {
		if err := r.Client.Delete(ctx, &pvcs[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete volume %s: %w", pvcs[i].Name, err)
		}
		names = append(names, pvcs[i].Name)
	}
	if len(names) > 0 {
		r.Recorder.Eventf(db, nil, corev1.EventTypeNormal, "Deleted", "Delete",
			"deletionPolicy Delete: deleted volumes %s", strings.Join(names, ", "))
	}
	return nil
}

// retain keeps the volumes (they carry no owner reference) and releases the
// Secrets from the Database, so a Database created again with the same name
// finds both and starts on the kept data with the kept credentials.
func (r *Reconciler) retain(ctx context.Context, db *v1alpha1.Database, pvcs []corev1.PersistentVolumeClaim) error {
	var kept []string
	for i := range pvcs {
		kept = append(kept, "volume "+pvcs[i].Name)
	}
	for _, name := range []string{db.CredentialsSecretName(), replicationName(db)} {
		s := &corev1.Secret{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("failed to get Secret %s: %w", name, err)
			}
			continue
		}
		base := s.DeepCopy()
		s.OwnerReferences = slices.DeleteFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == db.UID })
		if len(s.OwnerReferences) != len(base.OwnerReferences) {
			if err := r.Client.Patch(ctx, s, client.MergeFrom(base)); err != nil {
				return fmt.Errorf("failed to release Secret %s: %w", name, err)
			}
		}
		kept = append(kept, "Secret "+name)
	}
	if len(kept) > 0 {
		r.Recorder.Eventf(db, nil, corev1.EventTypeNormal, "Retained", "Delete",
			"deletionPolicy Retain: kept %s; a Database named %s in this namespace picks them up again",
			strings.Join(kept, ", "), db.Name)
	}
	return nil
}
