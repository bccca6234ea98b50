package database_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// spec.backup, the seed's shape: the Database owns a DatabaseBackup made
// from it, which follows its changes (and, Physical by default, turns
// archiving on); removing spec.backup deletes it. A DatabaseBackup of that
// name the Database does not own is left alone, and the status says so.
func TestSpecBackupManagesADatabaseBackup(t *testing.T) {
	ns := env.Namespace(t)
	storage := v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "wal",
		CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}}
	db := newDB(ns, "shop", func(d *v1alpha1.Database) { d.Spec.Backup = &v1alpha1.DatabaseBackupPolicy{Storage: storage} })
	create(t, db)
	var b *v1alpha1.DatabaseBackup
	eventually(t, "DatabaseBackup shop-backup", func() (bool, error) {
		var err error
		b, err = get(ns, "shop-backup", &v1alpha1.DatabaseBackup{})
		return err == nil, nil
	})
	if !metav1.IsControlledBy(b, db) || b.Spec.Method != v1alpha1.BackupMethodPhysical || b.Spec.Schedule != "@daily" ||
		b.Spec.DatabaseRef.Name != "shop" || b.Spec.Retention == nil || b.Spec.Retention.KeepLast != 7 {
		t.Fatalf("managed DatabaseBackup: owner %v, spec %+v", b.OwnerReferences, b.Spec)
	}
	eventually(t, "archiving configured for the Physical default", func() (bool, error) {
		cm, err := get(ns, "shop-config", &corev1.ConfigMap{})
		return err == nil && cm.Data[instanceapi.ArchiveFile] != "", nil
	})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Backup.Schedule = "@every 6h" })
	eventually(t, "the schedule followed", func() (bool, error) {
		b, err := get(ns, "shop-backup", &v1alpha1.DatabaseBackup{})
		return err == nil && b.Spec.Schedule == "@every 6h", nil
	})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Backup = nil })
	eventually(t, "shop-backup deleted", func() (bool, error) {
		_, err := get(ns, "shop-backup", &v1alpha1.DatabaseBackup{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	create(t, physicalBackup(ns, "other-backup", "elsewhere"))
	create(t, newDB(ns, "other", func(d *v1alpha1.Database) { d.Spec.Backup = &v1alpha1.DatabaseBackupPolicy{Storage: storage} }))
	got := waitCondition(t, ns, "other", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflictingResource)
	if c := condition(got, v1alpha1.ConditionReady); !strings.Contains(c.Message, "spec.backup: DatabaseBackup other-backup") {
		t.Fatalf("Ready = %s", c.Message)
	}
	if b, _ := get(ns, "other-backup", &v1alpha1.DatabaseBackup{}); b.Spec.DatabaseRef.Name != "elsewhere" {
		t.Fatalf("the unowned DatabaseBackup was changed: %+v", b.Spec)
	}
}
