package database

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// spec.backup: the seed's "backups on the Database" shape. The Database
// owns a DatabaseBackup made from it, so everything a DatabaseBackup does
// (schedule, retention, archiving and PITR for Physical, verification)
// works unchanged, and deleting the Database removes that object (never the
// stored backups).

// ManagedBackupName is the DatabaseBackup spec.backup makes.
func ManagedBackupName(db *v1alpha1.Database) string { return db.Name + "-backup" }

// applyPolicy writes spec.backup into a DatabaseBackup's spec, leaving the
// fields it does not carry as they are (the API server's defaults).
func applyPolicy(spec *v1alpha1.DatabaseBackupSpec, db *v1alpha1.Database) {
	p := db.Spec.Backup
	spec.DatabaseRef = v1alpha1.LocalObjectReference{Name: db.Name}
	spec.Schedule, spec.TimeZone, spec.Method, spec.Suspend = p.Schedule, p.TimeZone, p.Method, p.Suspend
	spec.Compression, spec.CompressionLevel = p.Compression, p.CompressionLevel
	spec.Storage, spec.Encryption = *p.Storage.DeepCopy(), p.Encryption.DeepCopy()
	spec.Retention, spec.MaxAge, spec.Verify = p.Retention.DeepCopy(), p.MaxAge.DeepCopy(), p.Verify.DeepCopy()
}

// applyManagedBackup creates, updates or deletes the DatabaseBackup of
// spec.backup. A DatabaseBackup of that name the Database does not own is
// left alone, and the status says so.
func (r *Reconciler) applyManagedBackup(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	name := ManagedBackupName(db)
	cur := &v1alpha1.DatabaseBackup{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get DatabaseBackup %s: %w", name, err)
	}
	exists := err == nil
	owned := exists && metav1.IsControlledBy(cur, db)
	switch {
	case db.Spec.Backup == nil:
		if owned {
			uid := cur.UID
			if err := r.Client.Delete(ctx, cur, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("failed to delete DatabaseBackup %s: %w", name, err)
			}
			controller.Event(ctx, r.Recorder, db, cur, corev1.EventTypeNormal, "BackupRemoved", "Backup",
				"spec.backup is gone: deleted DatabaseBackup %s (its stored backups stay)", name)
		}
		return nil
	case exists && !owned:
		obs.found.conflict = fmt.Sprintf("spec.backup: DatabaseBackup %s exists and is not this Database's; rename it, or remove spec.backup", name)
		return nil
	case !exists:
		b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: labels(db)}}
		applyPolicy(&b.Spec, db)
		if err := controllerutil.SetControllerReference(db, b, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, b); err != nil {
			return fmt.Errorf("failed to create DatabaseBackup %s: %w", name, err)
		}
		controller.Event(ctx, r.Recorder, db, b, corev1.EventTypeNormal, "BackupCreated", "Backup",
			"spec.backup: created DatabaseBackup %s (%s, %s)", name, b.Spec.Method, b.Spec.Schedule)
		return nil
	}
	next := cur.DeepCopy()
	applyPolicy(&next.Spec, db)
	if equality.Semantic.DeepEqual(next.Spec, cur.Spec) {
		return nil
	}
	if err := r.Client.Update(ctx, next); err != nil {
		return fmt.Errorf("failed to update DatabaseBackup %s from spec.backup: %w", name, err)
	}
	return nil
}
