package series_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
)

func nightly() *v1alpha1.DatabaseBackup {
	return &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "uid-1"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "https://MinIO.ns.svc:9000", Bucket: "b",
				CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}}}}
}

// A series is named by its prefix and location; its key, credentials and
// CA reach the Pod as environment and a volume, never as flags.
func TestStorageOfASeries(t *testing.T) {
	b := nightly()
	if got := series.Prefix(b); got != "ns/nightly/" {
		t.Errorf("Prefix = %q", got)
	}
	if got := series.Location(b); got != "s3://minio.ns.svc:9000/b/ns/nightly/" {
		t.Errorf("Location = %q", got)
	}
	if name, key := series.KeySecret(b); name != "nightly-series-key" || key != series.KeyKey {
		t.Errorf("KeySecret = %s, %s", name, key)
	}
	b.Spec.Storage.S3.CASecretRef = &v1alpha1.SecretKeyRef{Name: "minio-ca"}
	b.Spec.Encryption = &v1alpha1.BackupEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "enc"}}
	flags, env, vols, mounts := series.Storage(b, "restore-")
	args := flags.Args("restore-")
	for _, want := range []string{"--restore-prefix=ns/nightly/", "--restore-series-uid=uid-1", "--restore-series-name=ns/nightly",
		"--restore-database-name=orders", "--restore-series-key-required", "--restore-s3-bucket=b",
		"--restore-s3-ca-file=/etc/daytwo/restore-s3-ca/ca.crt"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	var names []string
	for _, e := range env {
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("env %s is not read from a Secret", e.Name)
		}
		names = append(names, e.Name)
	}
	if want := []string{backup.SeriesKeyEnv, backup.EncryptionKeyEnv, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}; !slices.Equal(names, want) {
		t.Errorf("env %q, want %q", names, want)
	}
	if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != "minio-ca" || len(mounts) != 1 || !mounts[0].ReadOnly {
		t.Errorf("CA volume %+v, mounts %+v", vols, mounts)
	}

	// A volume storage: the claim mounted, the path below it.
	b.Spec.Storage = v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "dumps", Path: "pg"}}
	flags, _, vols, _ = series.Storage(b, "")
	args = flags.Args("")
	if !slices.Contains(args, "--path=/backups/pg") || strings.Contains(strings.Join(args, " "), "s3-") {
		t.Errorf("PVC args %q", args)
	}
	if len(vols) != 1 || vols[0].PersistentVolumeClaim == nil || vols[0].PersistentVolumeClaim.ClaimName != "dumps" {
		t.Errorf("PVC volumes %+v", vols)
	}
	if got := series.Location(b); got != "pvc://ns/dumps/pg/ns/nightly/" {
		t.Errorf("PVC Location = %q", got)
	}
}

// The Physical DatabaseBackups of a Database, oldest first; others, and
// one being deleted, are left out.
func TestPhysicalOfOrdersTheArchiverFirst(t *testing.T) {
	at := func(name, db string, method v1alpha1.BackupMethod, age time.Duration) v1alpha1.DatabaseBackup {
		return v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
			Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: db}, Method: method}}
	}
	gone := at("gone", "orders", v1alpha1.BackupMethodPhysical, 3*time.Hour)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Unix(1e9, 0)}
	list := []v1alpha1.DatabaseBackup{
		at("young", "orders", v1alpha1.BackupMethodPhysical, time.Hour),
		at("b-old", "orders", v1alpha1.BackupMethodPhysical, 2*time.Hour),
		at("a-old", "orders", v1alpha1.BackupMethodPhysical, 2*time.Hour),
		at("dump", "orders", v1alpha1.BackupMethodLogical, 5*time.Hour),
		at("other", "users", v1alpha1.BackupMethodPhysical, 5*time.Hour),
		gone,
	}
	var names []string
	for _, b := range series.PhysicalOf(list, "orders") {
		names = append(names, b.Name)
	}
	if want := []string{"a-old", "b-old", "young"}; !slices.Equal(names, want) {
		t.Errorf("PhysicalOf = %q, want %q", names, want)
	}
}
