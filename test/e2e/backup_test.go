//go:build e2e

package e2e

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/pki"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

const backupChecksum = "SELECT count(*) || ':' || sum(hashtext(v)::bigint) FROM items"

// minioInCluster runs MinIO behind Service minio:9000 with credentials in
// Secret s3 under the keys DatabaseBackups read by default.
func minioInCluster(t *testing.T, ns string) { minio(t, ns, false, false) }

// minioInClusterTLS is minioInCluster over TLS, its certificate from a CA
// of the test's own, which no image knows: Secret minio-ca holds it
// (ca.crt), for S3Storage.caSecretRef.
func minioInClusterTLS(t *testing.T, ns string) { minio(t, ns, true, false) }

// minioTrustingTheCluster is minioInCluster with the cluster's own
// ServiceAccount issuer as its OpenID provider: a token of audience
// minioSTSAudience gets readwrite credentials from its STS
// (AssumeRoleWithWebIdentity), as a cloud's workload identity does. It
// returns the role to assume. MinIO reads the issuer's discovery document
// and keys without credentials, which the cluster allows only once
// system:unauthenticated may read them (a binding the test removes).
func minioTrustingTheCluster(t *testing.T, ns string) string {
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-issuer-discovery-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}}}
	if _, err := cluster.Kube.RbacV1().ClusterRoleBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	minio(t, ns, false, true)
	// MinIO names the role of its OpenID provider by the client ID.
	sum := sha1.Sum([]byte(minioSTSAudience)) // as MinIO computes it
	return "arn:minio:iam:::role/" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// minioSTSAudience is the client ID of MinIO's OpenID provider: the
// audience of the tokens it takes.
const minioSTSAudience = "minio-sts"

func minio(t *testing.T, ns string, withTLS, withIdentity bool) {
	t.Helper()
	secret(t, ns, "s3", map[string]string{"AWS_ACCESS_KEY_ID": "e2e-user", "AWS_SECRET_ACCESS_KEY": "e2e-password-" + ns})
	args, scheme := []string{"server", "/data", "--address", ":9000"}, corev1.URISchemeHTTP
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	vols := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if withTLS {
		now := time.Now()
		caCert, caKey, err := pki.NewCA("e2e private CA", now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		host := "minio." + ns + ".svc.cluster.local"
		cert, key, err := pki.Issue(caCert, caKey, host, []string{host, "minio." + ns + ".svc", "minio"}, pki.Server, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		secret(t, ns, "minio-ca", map[string]string{"ca.crt": string(caCert)})
		// MinIO reads public.crt and private.key, and wants a CAs directory
		// beside them (it cannot make one on a read-only mount).
		secret(t, ns, "minio-tls", map[string]string{"public.crt": string(cert), "private.key": string(key), "ca.crt": string(caCert)})
		args, scheme = append(args, "--certs-dir", "/certs"), corev1.URISchemeHTTPS
		mounts = append(mounts, corev1.VolumeMount{Name: "certs", MountPath: "/certs", ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "minio-tls", Items: []corev1.KeyToPath{{Key: "public.crt", Path: "public.crt"}, {Key: "private.key", Path: "private.key"},
				{Key: "ca.crt", Path: "CAs/ca.crt"}}}}})
	}
	var env []corev1.EnvVar
	if withIdentity {
		env = []corev1.EnvVar{
			{Name: "MINIO_IDENTITY_OPENID_CONFIG_URL", Value: "https://kubernetes.default.svc.cluster.local/.well-known/openid-configuration"},
			{Name: "MINIO_IDENTITY_OPENID_CLIENT_ID", Value: minioSTSAudience},
			{Name: "MINIO_IDENTITY_OPENID_ROLE_POLICY", Value: "readwrite"}}
		// The API server's certificate chains to the cluster's CA.
		args = append(args, "--certs-dir", "/certs")
		mounts = append(mounts, corev1.VolumeMount{Name: "certs", MountPath: "/certs", ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
			Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "CAs/kube-root-ca.crt"}}}}})
	}
	serve(t, ns, "minio", 1, 9000, corev1.PodSpec{
		SecurityContext: framework.RestrictedPod(),
		Containers: []corev1.Container{{
			Name: "minio", Image: minioImage, ImagePullPolicy: corev1.PullNever,
			Args: args,
			Env: append([]corev1.EnvVar{fromSecret("MINIO_ROOT_USER", "s3", "AWS_ACCESS_KEY_ID"),
				fromSecret("MINIO_ROOT_PASSWORD", "s3", "AWS_SECRET_ACCESS_KEY"), {Name: "HOME", Value: "/tmp"}}, env...),
			Ports: []corev1.ContainerPort{{ContainerPort: 9000}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/minio/health/ready",
				Port: intstr.FromInt32(9000), Scheme: scheme}}, PeriodSeconds: 1},
			VolumeMounts:    mounts,
			SecurityContext: framework.RestrictedContainer(),
		}},
		Volumes: vols,
	})
}

func waitBackup(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*v1alpha1.DatabaseBackup) bool) *v1alpha1.DatabaseBackup {
	t.Helper()
	return waitFor(t, &v1alpha1.DatabaseBackup{}, ns, name, timeout, what, cond)
}

// Scheduled backups of a real Database stream pg_dump into an in-cluster
// MinIO from real Jobs, retention prunes the bucket, and a new Database
// bootstrapped from the newest backup holds the same rows.
func TestBackupScheduleRetentionAndRestore(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := restrictedNamespace(t)
	cluster.ReserveCPU(t, ns, 300)
	// MinIO over TLS with a CA no image knows: every run, verification,
	// restore and final backup below trusts it through caSecretRef alone.
	minioInClusterTLS(t, ns)
	createDatabase(t, ns, "orders", nil)
	waitDatabase(t, ns, "orders", 3*time.Minute, "Ready", isReady(1, ""))
	psqlPod(t, ns, "psql", "orders")
	sql(t, ns, "psql", "orders-rw", "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 200000) g")
	want := sql(t, ns, "psql", "orders-rw", backupChecksum)
	wantNightly := want // what orders-s3's backups hold

	// Without the CA, the image trusts no certificate of it: the run fails
	// on verification, saying so.
	s3 := v1alpha1.S3Storage{Endpoint: fmt.Sprintf("minio.%s.svc.cluster.local:9000", ns), Bucket: "backups",
		CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}
	untrusting := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-ca"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"}, BackoffLimit: ptr.To[int32](0),
			Storage: v1alpha1.BackupStorage{S3: s3.DeepCopy()}}}
	if err := cluster.Client.Create(context.Background(), untrusting); err != nil {
		t.Fatal(err)
	}
	failed := waitBackup(t, ns, "no-ca", 2*time.Minute, "the run failed", func(b *v1alpha1.DatabaseBackup) bool {
		return meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
	})
	if c := meta.FindStatusCondition(failed.Status.Conditions, v1alpha1.ConditionLastRunFailed); !strings.Contains(c.Message, "certificate") {
		t.Fatalf("the run without the CA failed, but not on the certificate: %s", c.Message)
	}
	if err := cluster.Client.Delete(context.Background(), untrusting); err != nil {
		t.Fatal(err)
	}
	s3.CASecretRef = &v1alpha1.SecretKeyRef{Name: "minio-ca"}

	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-s3"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Schedule:    "@every 20s",
			Storage:     v1alpha1.BackupStorage{S3: &s3},
			Retention:   &v1alpha1.BackupRetention{KeepLast: 2},
			MaxAge:      &metav1.Duration{Duration: time.Hour},
			Verify:      &v1alpha1.BackupVerify{EveryNth: ptr.To[int32](2), Query: "SELECT id FROM items WHERE id = 200000"},
		},
	}
	if err := cluster.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := waitBackup(t, ns, "orders-s3", 4*time.Minute, "two retained and one pruned", func(b *v1alpha1.DatabaseBackup) bool {
		c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
		if c != nil && c.Status == metav1.ConditionTrue {
			t.Fatalf("a backup run failed: %s", c.Message)
		}
		return len(b.Status.Backups) == 2 && b.Status.PrunedTotal >= 1
	})
	t.Logf("3 scheduled runs in %s; newest %s: %d bytes, sha256 %s", time.Since(start).Round(time.Second),
		got.Status.Backups[0].ID, got.Status.Backups[0].SizeBytes, got.Status.Backups[0].SHA256[:12])
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionBackupStale); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("BackupStale = %+v", c)
	}
	if got.Status.NextScheduleTime == nil || got.Status.LastBackupTime == nil {
		t.Errorf("schedule status: %+v", got.Status)
	}
	got = waitBackup(t, ns, "orders-s3", 5*time.Minute, "a verification", func(b *v1alpha1.DatabaseBackup) bool {
		return b.Status.LastVerification != nil
	})
	v := got.Status.LastVerification
	t.Logf("verification of %s: %s, restore took %ds: %s", v.BackupID, v.Result, v.RestoreSeconds, v.Message)
	if v.Result != v1alpha1.VerificationSucceeded || v.RestoreSeconds <= 0 {
		t.Fatalf("verification: %+v", v)
	}
	framework.Eventually(t, 2*time.Minute, "the throwaway Database removed", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-s3-verify"}, &v1alpha1.Database{})
		return apierrors.IsNotFound(err), nil
	})
	updateBackup(t, ns, "orders-s3", func(b *v1alpha1.DatabaseBackup) { b.Spec.Suspend = true })
	newest := waitBackup(t, ns, "orders-s3", time.Minute, "no active Job", func(b *v1alpha1.DatabaseBackup) bool {
		return len(b.Status.ActiveJobs) == 0
	}).Status.Backups[0].ID

	start = time.Now()
	createDatabase(t, ns, "copy", func(db *v1alpha1.Database) {
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "orders-s3"}, BackupID: newest}}
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
	})
	waitDatabase(t, ns, "copy", 4*time.Minute, "Ready from the backup", isReady(1, ""))
	t.Logf("restored Database Ready in %s", time.Since(start).Round(100*time.Millisecond))
	psqlPod(t, ns, "psql-copy", "copy")
	if got := sql(t, ns, "psql-copy", "copy-rw", backupChecksum); got != want {
		t.Fatalf("restored checksum %s, want %s", got, want)
	}
	checkStorageKeysOnlyInTheRestoreStep(t, ns, "copy-0", "s3")

	// deletionPolicy Snapshot: the final backup outlives the Database and restores.
	storage := got.Spec.Storage.DeepCopy()
	updateDatabase(t, ns, "orders", func(db *v1alpha1.Database) {
		db.Spec.BackupStorage = storage
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot
	})
	if err := cluster.Client.Delete(context.Background(), &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	framework.Eventually(t, 3*time.Minute, "orders deleted after its final backup", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &v1alpha1.Database{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("Snapshot deletion took %s", time.Since(start).Round(100*time.Millisecond))

	// orders again, restored from its final backup and written to, then
	// deleted again with Snapshot: the earlier final backup must not count,
	// the rows written since the restore come back.
	createDatabase(t, ns, "orders", func(db *v1alpha1.Database) {
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "orders-final"}}}
		db.Spec.BackupStorage = storage
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot
	})
	waitDatabase(t, ns, "orders", 4*time.Minute, "Ready from the final backup", isReady(1, ""))
	psqlPod(t, ns, "psql-again", "orders")
	if got := sql(t, ns, "psql-again", "orders-rw", backupChecksum); got != want {
		t.Fatalf("checksum of orders restored from its final backup %s, want %s", got, want)
	}
	sql(t, ns, "psql-again", "orders-rw", "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(200001, 200100) g")
	want = sql(t, ns, "psql-again", "orders-rw", backupChecksum)
	if err := cluster.Client.Delete(context.Background(), &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 3*time.Minute, "orders deleted after its second final backup", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &v1alpha1.Database{})
		return apierrors.IsNotFound(err), nil
	})
	createDatabase(t, ns, "reborn", func(db *v1alpha1.Database) {
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "orders-final"}}}
	})
	waitDatabase(t, ns, "reborn", 4*time.Minute, "Ready from the final backup", isReady(1, ""))
	psqlPod(t, ns, "psql-reborn", "reborn")
	if got := sql(t, ns, "psql-reborn", "reborn-rw", backupChecksum); got != want {
		t.Fatalf("checksum after the second Snapshot round trip %s, want %s (rows written after the restore)", got, want)
	}

	// A one-shot backup to a volume instead of S3, restored again.
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backups"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := cluster.Client.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	onVolume := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reborn-pvc"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "reborn"},
			Storage: v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups", Path: "reborn"}}}}
	if err := cluster.Client.Create(context.Background(), onVolume); err != nil {
		t.Fatal(err)
	}
	waitBackup(t, ns, "reborn-pvc", 3*time.Minute, "a backup on the volume", func(b *v1alpha1.DatabaseBackup) bool {
		c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
		if c != nil && c.Status == metav1.ConditionTrue {
			t.Fatalf("the volume backup failed: %s", c.Message)
		}
		return len(b.Status.Backups) == 1
	})
	createDatabase(t, ns, "from-pvc", func(db *v1alpha1.Database) {
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "reborn-pvc"}}}
	})
	waitDatabase(t, ns, "from-pvc", 4*time.Minute, "Ready from the volume backup", isReady(1, ""))
	psqlPod(t, ns, "psql-from-pvc", "from-pvc")
	if got := sql(t, ns, "psql-from-pvc", "from-pvc-rw", backupChecksum); got != want {
		t.Fatalf("checksum after the volume round trip %s, want %s", got, want)
	}

	// Deleted with Retain and created again asking for a restore: the kept
	// volume is not served in place of the restore.
	if err := cluster.Client.Delete(context.Background(), &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "from-pvc"}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "from-pvc deleted, its volume kept", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "from-pvc"}, &v1alpha1.Database{})
		return apierrors.IsNotFound(err), nil
	})
	createDatabase(t, ns, "from-pvc", func(db *v1alpha1.Database) {
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "orders-s3"}}}
	})
	conflict := waitDatabase(t, ns, "from-pvc", 3*time.Minute, "DataConflict", func(db *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonDataConflict
	})
	t.Logf("refused: %s", meta.FindStatusCondition(conflict.Status.Conditions, v1alpha1.ConditionReady).Message)

	// Doing what the message says (delete the claim) lets the restore run.
	// It restores orders-s3's newest backup: orders-final, a series of
	// keepLast 1 at the same bucket and prefix, pruned twice beside it and
	// touched none of it.
	for _, obj := range []client.Object{
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pgdata-from-pvc-0"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "from-pvc-0"}},
	} {
		if err := cluster.Client.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	waitDatabase(t, ns, "from-pvc", 4*time.Minute, "Ready from orders-s3 once the kept claim is gone", isReady(1, ""))
	if got := sql(t, ns, "psql-from-pvc", "from-pvc-rw", backupChecksum); got != wantNightly {
		t.Fatalf("checksum of orders-s3's newest backup after two Snapshot deletions beside it %s, want %s", got, wantNightly)
	}
}

func updateBackup(t *testing.T, ns, name string, mutate func(*v1alpha1.DatabaseBackup)) {
	t.Helper()
	// The operator writes the object too (its status, its finalizer): a
	// conflict is read again, not a failure (CI saw one).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := &v1alpha1.DatabaseBackup{}
		if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return err
		}
		mutate(b)
		return cluster.Client.Update(context.Background(), b)
	})
	if err != nil {
		t.Fatalf("update DatabaseBackup %s: %v", name, err)
	}
}

// The in-cluster operator serves the validating webhook with the certificate
// it manages: the API server refuses a schedule that only parsing catches.
func TestWebhookRefusesAnUnparseableSchedule(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := restrictedNamespace(t)
	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Schedule:    "61 * * * *",
			Storage:     v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}},
		},
	}
	// The webhook's failurePolicy is Ignore: until the operator serves it, a
	// create goes through; so the refusal must come, not merely be allowed.
	framework.Eventually(t, time.Minute, "the webhook refusing minute 61", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Create(ctx, b.DeepCopy())
		if err == nil {
			_ = cluster.Client.Delete(ctx, b.DeepCopy())
			return false, nil
		}
		return strings.Contains(err.Error(), "denied the request") && strings.Contains(err.Error(), "spec.schedule"), nil
	})
}

// checkStorageKeysOnlyInTheRestoreStep: the S3 keys of secret reach the
// restore init container of pod only; the running postgres container has
// neither a reference to them nor them in its process environment.
func checkStorageKeysOnlyInTheRestoreStep(t *testing.T, ns, pod, secret string) {
	t.Helper()
	p := &corev1.Pod{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
		t.Fatal(err)
	}
	refs := func(c corev1.Container) int {
		n := 0
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret {
				n++
			}
		}
		return n
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == "restore" && refs(c) != 2 {
			t.Errorf("the restore init container has %d of the storage's keys; want 2", refs(c))
		}
	}
	for _, c := range p.Spec.Containers {
		if refs(c) != 0 {
			t.Errorf("container %s of %s refers to the storage's keys", c.Name, pod)
		}
	}
	environ := cluster.ExecOK(t, ns, pod, "postgres", "cat", "/proc/1/environ")
	if strings.Contains(environ, "AWS_SECRET_ACCESS_KEY") || strings.Contains(environ, "e2e-password-") {
		t.Errorf("the running instance manager's environment holds the storage's secret key")
	}
}
