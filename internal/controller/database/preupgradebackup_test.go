package database_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// With backup storage, a logical backup is stored before any instance
// stops; only then does the upgrade go on.
func TestMajorUpgradeTakesABackupFirst(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "careful", func(d *v1alpha1.Database) {
		d.Spec.BackupStorage = &v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}
	})
	create(t, db)
	waitStatefulSet(t, ns, "careful")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Version = "17" })
	var pre *v1alpha1.DatabaseBackup
	eventually(t, "the pre-upgrade DatabaseBackup", func() (bool, error) {
		b, err := get(ns, "careful-pre-upgrade", &v1alpha1.DatabaseBackup{})
		pre = b
		return err == nil, client.IgnoreNotFound(err)
	})
	if pre.Spec.Storage.PVC == nil || pre.Spec.DatabaseRef.Name != "careful" || pre.Annotations[v1alpha1.AnnotationBackupRequested] == "" {
		t.Fatalf("pre-upgrade DatabaseBackup: %+v %v", pre.Spec, pre.Annotations)
	}
	eventually(t, "status.upgrade BackingUp", func() (bool, error) {
		d, err := get(ns, "careful", &v1alpha1.Database{})
		return err == nil && d.Status.Upgrade != nil && d.Status.Upgrade.Phase == v1alpha1.MajorUpgradeBackingUp, err
	})
	// While it runs, every instance keeps serving and no Job exists: the
	// reconcile that wrote BackingUp decided it with the action
	// (decideUpgrade), and would have stopped them in the same pass.
	sts, _ := get(ns, "careful", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 1 {
		t.Fatalf("instances stopped before the pre-upgrade backup was stored: replicas %d", *sts.Spec.Replicas)
	}
	if _, err := get(ns, "careful-upgrade", &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Fatalf("upgrade Job before the backup: %v", err)
	}
	// The backup is stored: the upgrade goes on.
	storeRequestedBackup(t, pre)
	upgradeJobOf(t, ns, "careful")
	d, _ := get(ns, "careful", &v1alpha1.Database{})
	if u := d.Status.Upgrade; u == nil || u.BackupID == "" {
		t.Fatalf("status.upgrade does not name the pre-upgrade backup: %+v", u)
	}
}
