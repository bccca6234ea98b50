package database

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
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
	// Only the StatefulSet's own claims: another volume that merely carries
	// the label is not this Database's to delete.
	pvcs.Items = slices.DeleteFunc(pvcs.Items, func(p corev1.PersistentVolumeClaim) bool {
		i := strings.LastIndex(p.Name, "-")
		n, err := strconv.Atoi(p.Name[i+1:])
		return err != nil || n < 0 || p.Name != pvcName(db, n)
	})
	switch db.Spec.DeletionPolicy {
	case v1alpha1.DatabaseDeletionSnapshot:
		if len(pvcs.Items) > 0 && hibernated(db) {
			r.deleting(db, "deletionPolicy Snapshot cannot take the final backup of a hibernated Database: no instance runs. "+
				"Set deletionPolicy to Retain to keep the volumes, or to Delete")
			return nil
		}
		if len(pvcs.Items) > 0 {
			done, err := r.finalBackup(ctx, db)
			if err != nil || !done {
				return err
			}
		}
		if err := r.deleteVolumes(ctx, db, pvcs.Items); err != nil {
			return err
		}
	case v1alpha1.DatabaseDeletionDelete:
		if err := r.deleteVolumes(ctx, db, pvcs.Items); err != nil {
			return err
		}
	case v1alpha1.DatabaseDeletionOrphan:
		if err := r.orphan(ctx, db); err != nil {
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

// FinalBackupName is the one-shot DatabaseBackup that takes a Database's
// final backup under deletionPolicy Snapshot. It outlives the Database, so
// a new one restores with bootstrap.fromBackup.backupRef set to it.
func FinalBackupName(db *v1alpha1.Database) string { return db.Name + "-final" }

// finalBackup takes the final backup with the DatabaseBackup machinery and
// reports whether it is stored. Only the run requested at this Database's
// deletion (its UID and deletion time on <name>-final) counts: <name>-final
// may hold an earlier Database's final backup, even the one this Database
// was restored from. While the backup runs, and if it fails, the Database stays, and its
// status and Events say why.
func (r *Reconciler) finalBackup(ctx context.Context, db *v1alpha1.Database) (bool, error) {
	b := &v1alpha1.DatabaseBackup{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: FinalBackupName(db)}, b)
	if apierrors.IsNotFound(err) {
		return false, r.createFinalBackup(ctx, db)
	}
	if err != nil {
		return false, fmt.Errorf("failed to get the final DatabaseBackup: %w", err)
	}
	if b.Labels[labelFinalBackupOf] != db.Name {
		r.deleting(db, fmt.Sprintf("DatabaseBackup %s exists and is not this Database's final backup; rename or delete it", b.Name))
		return false, nil
	}
	since := db.DeletionTimestamp.Time
	if b.Annotations[v1alpha1.AnnotationFinalBackupOfUID] != string(db.UID) || b.Annotations[v1alpha1.AnnotationBackupRequested] != finalRequest(db) {
		return false, r.requestFinalBackup(ctx, db, b)
	}
	last := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
	switch {
	case last != nil && last.Status == metav1.ConditionTrue && b.Status.LastFailureTime != nil && !b.Status.LastFailureTime.Time.Before(since):
		r.deleting(db, fmt.Sprintf("The final backup failed (%s); delete DatabaseBackup %s to retry, or set deletionPolicy to Retain or Delete",
			last.Message, b.Name))
		return false, nil
	case len(b.Status.Backups) == 0 || b.Status.Backups[0].ID != backup.NewID(since):
		// The run asked for at the deletion stores the backup with this
		// ID; an earlier backup, however recent, does not count.
		r.deleting(db, "Taking the final backup with DatabaseBackup "+b.Name)
		return false, nil
	}
	controller.Event(ctx, r.Recorder, db, b, corev1.EventTypeNormal, "FinalBackup", "Delete",
		"deletionPolicy Snapshot: final backup stored; restore it with bootstrap.fromBackup.backupRef %s", b.Name)
	return true, nil
}

// finalRequest is the run a final backup asks for: the deletion's start.
func finalRequest(db *v1alpha1.Database) string {
	return db.DeletionTimestamp.UTC().Format(time.RFC3339)
}

func (r *Reconciler) createFinalBackup(ctx context.Context, db *v1alpha1.Database) error {
	b := oneShotBackup(db, FinalBackupName(db), map[string]string{labelFinalBackupOf: db.Name},
		map[string]string{v1alpha1.AnnotationFinalBackupOfUID: string(db.UID), v1alpha1.AnnotationBackupRequested: finalRequest(db)})
	if err := r.Client.Create(ctx, b); err != nil {
		return fmt.Errorf("failed to create the final DatabaseBackup: %w", err)
	}
	controller.Event(ctx, r.Recorder, db, b, corev1.EventTypeNormal, "FinalBackup", "Delete",
		"deletionPolicy Snapshot: taking the final backup with DatabaseBackup %s", b.Name)
	r.deleting(db, "Taking the final backup with DatabaseBackup "+b.Name)
	return nil
}

// requestFinalBackup points an earlier Database's final DatabaseBackup at
// this one and asks it for a run now. Once that run succeeds, keepLast 1
// prunes the earlier final backup, never before.
func (r *Reconciler) requestFinalBackup(ctx context.Context, db *v1alpha1.Database, b *v1alpha1.DatabaseBackup) error {
	if err := r.requestRun(ctx, b, map[string]string{v1alpha1.AnnotationFinalBackupOfUID: string(db.UID),
		v1alpha1.AnnotationBackupRequested: finalRequest(db)}); err != nil {
		return fmt.Errorf("failed to ask DatabaseBackup %s for the final backup: %w", b.Name, err)
	}
	controller.Event(ctx, r.Recorder, db, b, corev1.EventTypeNormal, "FinalBackup", "Delete",
		"deletionPolicy Snapshot: taking the final backup with DatabaseBackup %s", b.Name)
	r.deleting(db, "Taking the final backup with DatabaseBackup "+b.Name)
	return nil
}

// requestRun asks the one-shot DatabaseBackup b for another run: it sets
// annotations (AnnotationBackupRequested among them) under an optimistic
// lock, so a concurrent change is never overwritten.
func (r *Reconciler) requestRun(ctx context.Context, b *v1alpha1.DatabaseBackup, annotations map[string]string) error {
	base := b.DeepCopy()
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	maps.Copy(b.Annotations, annotations)
	return r.Client.Patch(ctx, b, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// deleting says what a deletion waits for.
func (r *Reconciler) deleting(db *v1alpha1.Database, msg string) {
	conditions.Set(&db.Status.Conditions, db.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, msg)
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
		controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "Deleted", "Delete",
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
	// The CA too: clients keep trusting the ca.crt they were given.
	for _, name := range []string{db.CredentialsSecretName(), replicationName(db), caSecretName(db)} {
		s := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, name)
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
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
		controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "Retained", "Delete",
			"deletionPolicy Retain: kept %s; a Database named %s in this namespace picks them up again",
			strings.Join(kept, ", "), db.Name)
	}
	return nil
}

// finalBackupStorage is where deletionPolicy Snapshot's final backup goes:
// spec.backupStorage, else spec.backup's storage.
func finalBackupStorage(db *v1alpha1.Database) v1alpha1.BackupStorage {
	if db.Spec.BackupStorage != nil {
		return *db.Spec.BackupStorage.DeepCopy()
	}
	return *db.Spec.Backup.Storage.DeepCopy()
}
