package databasebackup_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Two DatabaseBackups that store at the same bucket and prefix both say so;
// once one goes, the other no longer does.
func TestSharedLocationIsReported(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) { b.Spec.Schedule = "@daily" })
	waitCondition(t, b, v1alpha1.ConditionSharedLocation, metav1.ConditionFalse, v1alpha1.ReasonLocationExclusive)
	other := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hourly"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Schedule:    "@hourly",
			Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "MinIO:9000", Bucket: "backups", Insecure: true,
				Prefix: ns + "/nightly", CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}},
		},
	}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, b, v1alpha1.ConditionSharedLocation, metav1.ConditionTrue, v1alpha1.ReasonLocationShared)
	for _, c := range got.Status.Conditions {
		if c.Type == v1alpha1.ConditionSharedLocation && !strings.Contains(c.Message, ns+"/hourly") {
			t.Errorf("message %q does not name the other DatabaseBackup", c.Message)
		}
	}
	waitCondition(t, other, v1alpha1.ConditionSharedLocation, metav1.ConditionTrue, v1alpha1.ReasonLocationShared)
	if err := env.Client.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, b, v1alpha1.ConditionSharedLocation, metav1.ConditionFalse, v1alpha1.ReasonLocationExclusive)
}
