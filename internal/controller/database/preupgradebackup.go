package database

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// The pre-upgrade backup: when the Database has backup storage (spec.backup
// or spec.backupStorage), a one-shot DatabaseBackup <name>-pre-upgrade
// stores a logical backup before the instances stop. Its annotation ties
// the run to the attempt (the version and the retry annotation), so a
// retry takes a fresh one. Restore it with bootstrap.fromBackup.

// backupState is where the pre-upgrade backup of this attempt stands.
type backupState int

func preUpgradeBackupName(db *v1alpha1.Database) string { return db.Name + "-pre-upgrade" }

// preUpgradeAttempt identifies this attempt's backup request.
func preUpgradeAttempt(db *v1alpha1.Database) string {
	return db.Spec.Version + "/" + db.Annotations[v1alpha1.AnnotationRetryUpgrade]
}

// preUpgradeBackupState reads the pre-upgrade DatabaseBackup b (nil when
// none) for this attempt.
func preUpgradeBackupState(db *v1alpha1.Database, b *v1alpha1.DatabaseBackup) (backupState, string) {
	if db.Spec.BackupStorage == nil && db.Spec.Backup == nil {
		return backupNotNeeded, ""
	}
	if b == nil || b.Annotations[annPreUpgradeFor] != preUpgradeAttempt(db) {
		return backupWanted, ""
	}
	at, err := time.Parse(time.RFC3339, b.Annotations[v1alpha1.AnnotationBackupRequested])
	if err != nil {
		return backupWanted, ""
	}
	if len(b.Status.Backups) > 0 && b.Status.Backups[0].ID == backup.NewID(at) {
		return backupDone, ""
	}
	last := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
	if last != nil && last.Status == metav1.ConditionTrue && b.Status.LastFailureTime != nil && !b.Status.LastFailureTime.Time.Before(at) {
		return backupFailed, last.Message
	}
	return backupRunning, ""
}

// takePreUpgradeBackup creates the pre-upgrade DatabaseBackup, or asks the
// existing one for a run of this attempt, and reports it in status.upgrade.
func (r *Reconciler) takePreUpgradeBackup(ctx context.Context, db *v1alpha1.Database, obs *observation, from, to string) error {
	name := preUpgradeBackupName(db)
	b := obs.preBackup
	request := obs.now.UTC().Format(time.RFC3339)
	switch {
	case b == nil:
		b = oneShotBackup(db, name, map[string]string{labelPreUpgradeOf: db.Name},
			map[string]string{annPreUpgradeFor: preUpgradeAttempt(db), v1alpha1.AnnotationBackupRequested: request})
		if err := controllerutil.SetControllerReference(db, b, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, b); err != nil {
			return fmt.Errorf("failed to create the pre-upgrade DatabaseBackup: %w", err)
		}
	case b.Labels[labelPreUpgradeOf] != db.Name:
		obs.found.rolloutWaiting = fmt.Sprintf("Major upgrade waits: DatabaseBackup %s exists and is not this Database's pre-upgrade backup; rename it", name)
		return nil
	case b.Annotations[annPreUpgradeFor] != preUpgradeAttempt(db):
		if err := r.requestRun(ctx, b, map[string]string{annPreUpgradeFor: preUpgradeAttempt(db),
			v1alpha1.AnnotationBackupRequested: request}); err != nil {
			return fmt.Errorf("failed to ask DatabaseBackup %s for the pre-upgrade backup: %w", name, err)
		}
	default:
		return nil // asked for; it runs
	}
	at, _ := time.Parse(time.RFC3339, request)
	db.Status.Upgrade = &v1alpha1.MajorUpgradeStatus{From: from, To: to, Phase: v1alpha1.MajorUpgradeBackingUp,
		BackupID: backup.NewID(at), Message: "taking the pre-upgrade backup with DatabaseBackup " + name}
	controller.Event(ctx, r.Recorder, db, b, corev1.EventTypeNormal, "MajorUpgrade", "Upgrade",
		"Upgrading PostgreSQL %s to %s: taking the pre-upgrade backup with DatabaseBackup %s", from, to, name)
	return nil
}

const (
	backupNotNeeded backupState = iota // no backup storage configured
	backupWanted                       // not asked for this attempt yet
	backupRunning
	backupDone
	backupFailed
)

const (
	labelPreUpgradeOf = "daytwo.dev/pre-upgrade-of"
	annPreUpgradeFor  = "daytwo.dev/pre-upgrade-for"
)
