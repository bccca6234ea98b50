package database

import (
	"testing"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Every volume a restore's storage mounts is in the pod: a web identity's
// token and a private CA (a missing one made the StatefulSet invalid).
func TestRestoreMountsHaveTheirVolumes(t *testing.T) {
	b := &v1alpha1.DatabaseBackup{Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
		Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "wal",
			WebIdentity: &v1alpha1.S3WebIdentity{RoleARN: "arn:minio:iam:::role/x", Audience: "minio-sts"},
			CASecretRef: &v1alpha1.SecretKeyRef{Name: "minio-ca"}}}}}
	flags, env, vols, mounts := series.Storage(b, instanceapi.RestorePrefix)
	r := &restoreSource{flags: instanceapi.RunFlags{Restore: flags}, env: env, volumes: vols, mounts: mounts}
	have := map[string]bool{}
	for _, v := range restoreVolumes(r) {
		have[*v.Name] = true
	}
	for _, m := range restoreMounts(r) {
		if !have[*m.Name] {
			t.Errorf("mount %s has no volume (volumes: %v)", *m.Name, have)
		}
	}
	if len(mounts) != 2 || flags.WebIdentityTokenFile == "" || flags.RoleARN == "" {
		t.Errorf("mounts %v, token file %q, role %q", mounts, flags.WebIdentityTokenFile, flags.RoleARN)
	}
}
