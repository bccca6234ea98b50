//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// Continuous backup, end to end: spec.backup on a running Database of two
// instances makes a Physical DatabaseBackup, which turns WAL archiving on
// (the instances roll with it); its first run waits for archiving and then
// streams a base backup from the replica to MinIO; the primary fails over;
// a new Database bootstrapped from the base backup with a target time
// after the failover holds exactly the rows committed before that time:
// point-in-time recovery through the API, across the timeline switch. The base backup is verified meanwhile (a
// throwaway Database restored from it through the archive to its end). The
// managed DatabaseBackup goes with the Database.
func TestContinuousBackupRestoresToATime(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := restrictedNamespace(t)
	cluster.ReserveCPU(t, ns, 300)
	// No static key anywhere: the instances, the backup Jobs, the
	// verification's throwaway and the restore reach MinIO with their
	// ServiceAccount's token, which MinIO trusts through the cluster's
	// issuer (workload identity without a cloud).
	role := minioTrustingTheCluster(t, ns)
	// Two instances: the base backup streams from the replica.
	createDatabase(t, ns, "ledger", func(db *v1alpha1.Database) { db.Spec.Instances = ptr.To[int32](2) })
	waitDatabase(t, ns, "ledger", 3*time.Minute, "Ready", isReady(2, ""))
	psqlPod(t, ns, "psql", "ledger")
	sql(t, ns, "psql", "ledger-rw", "CREATE TABLE entries (id int PRIMARY KEY); INSERT INTO entries SELECT generate_series(1, 100)")

	// The seed's shape: backups declared on the Database, Physical (the
	// default) with its schedule's first run at once.
	// Encrypted client-side: the base backup and every WAL file, restored
	// below (and verified) with the key alone.
	secret(t, ns, "ledger-encryption", map[string]string{"key": "e2e-encryption-key-of-32-bytes-or-more-" + ns})
	start := time.Now()
	updateDatabase(t, ns, "ledger", func(db *v1alpha1.Database) {
		db.Spec.Backup = &v1alpha1.DatabaseBackupPolicy{Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{
			Endpoint: fmt.Sprintf("minio.%s.svc.cluster.local:9000", ns), Bucket: "wal", Insecure: true,
			WebIdentity: &v1alpha1.S3WebIdentity{RoleARN: role, Audience: minioSTSAudience}}},
			Encryption: &v1alpha1.BackupEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "ledger-encryption"}},
			Verify:     &v1alpha1.BackupVerify{EveryNth: ptr.To[int32](1)}}
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
	})
	db := waitDatabase(t, ns, "ledger", 4*time.Minute, "archiving WAL", func(db *v1alpha1.Database) bool {
		return meta.IsStatusConditionTrue(db.Status.Conditions, v1alpha1.ConditionContinuousArchiving) && isReady(2, "")(db)
	})
	t.Logf("archiving in %s: %s", time.Since(start).Round(time.Second),
		meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionContinuousArchiving).Message)
	got := waitBackup(t, ns, "ledger-backup", 4*time.Minute, "a base backup", func(b *v1alpha1.DatabaseBackup) bool {
		if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionLastRunFailed); c != nil && c.Status == metav1.ConditionTrue {
			t.Fatalf("the base backup failed: %s", c.Message)
		}
		return len(b.Status.Backups) == 1
	})
	t.Logf("base backup %s: %d bytes, %s after the DatabaseBackup", got.Status.Backups[0].ID, got.Status.Backups[0].SizeBytes,
		time.Since(start).Round(time.Second))
	jobs := &batchv1.JobList{}
	if err := cluster.Client.List(context.Background(), jobs, client.InNamespace(ns), client.MatchingLabels{"daytwo.dev/backup": "ledger-backup"}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) == 0 {
		t.Fatal("no backup Job of ledger-backup is kept")
	}
	for _, j := range jobs.Items {
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			// The replicas' Service first when a replica was ready as the
			// Job was made, the primary's after it; the primary's alone
			// when none was (archiving rolls the instances, so that
			// depends on timing; the unit test pins the rule).
			ro, rw := "ledger-ro."+ns+".svc", "ledger-rw."+ns+".svc"
			if e.Name == "PGHOST" {
				if e.Value != ro+","+rw && e.Value != rw {
					t.Errorf("Job %s took the base backup from %s, want %s,%s or, with no replica ready, %s", j.Name, e.Value, ro, rw, rw)
				}
				t.Logf("Job %s: PGHOST=%s", j.Name, e.Value)
			}
		}
	}

	sql(t, ns, "psql", "ledger-rw", "INSERT INTO entries SELECT generate_series(101, 200)")
	// A failover between the base backup and the target: the recovery
	// crosses the timeline switch, from the old primary's WAL to the new
	// one's, both archived.
	failedOver := time.Now()
	if err := cluster.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Status.Primary}}); err != nil {
		t.Fatal(err)
	}
	writeUntilAccepted(t, ns, "psql", "ledger-rw", "INSERT INTO entries SELECT generate_series(201, 250)")
	db = waitDatabase(t, ns, "ledger", time.Minute, "failed over", func(d *v1alpha1.Database) bool {
		f := d.Status.LastFailover
		// Status times are whole seconds, and the failover may come within
		// the second of the deletion.
		return f != nil && !f.DetectedTime.Before(&metav1.Time{Time: failedOver.Truncate(time.Second)}) && d.Status.Primary == f.To
	})
	t.Logf("failed over from %s to %s; writes again %s after the deletion", db.Status.LastFailover.From, db.Status.LastFailover.To,
		time.Since(failedOver).Round(100*time.Millisecond))
	if tl := sql(t, ns, "psql", "ledger-rw", "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"); tl == "00000001" {
		t.Fatalf("the new primary writes timeline %s: no timeline switch to recover across", tl)
	}
	sql(t, ns, "psql", "ledger-rw", "INSERT INTO entries SELECT generate_series(251, 300)")
	time.Sleep(1100 * time.Millisecond)
	target := time.Now().UTC().Truncate(time.Second)
	time.Sleep(1100 * time.Millisecond)
	sql(t, ns, "psql", "ledger-rw", "INSERT INTO entries SELECT generate_series(301, 400)")
	// The rows after the target must be archived for a recovery to know
	// it passed the target: archive_timeout ships their segment within a
	// minute.
	segment := sql(t, ns, "psql", "ledger-rw", "SELECT pg_walfile_name(pg_current_wal_lsn())")
	waitDatabase(t, ns, "ledger", 2*time.Minute, "segment "+segment+" archived", func(db *v1alpha1.Database) bool {
		w := db.Status.WALArchive
		return w != nil && w.Backup == "ledger-backup" && w.LastArchivedWAL >= segment
	})
	// The DatabaseBackup's window reaches the target: from the base
	// backup's end to what the Database archived since.
	got = waitBackup(t, ns, "ledger-backup", 30*time.Second, "a recoverability window past the target", func(b *v1alpha1.DatabaseBackup) bool {
		r := b.Status.Recoverability
		return r != nil && !r.LastPoint.Time.Before(target)
	})
	if r := got.Status.Recoverability; r.FirstPoint.Time.After(target) || !r.FirstPoint.Time.Equal(got.Status.Backups[0].Time.Time) {
		t.Fatalf("recoverability %s to %s; the base backup ended %s, the target is %s", r.FirstPoint.Format(time.RFC3339),
			r.LastPoint.Format(time.RFC3339), got.Status.Backups[0].Time.Format(time.RFC3339), target.Format(time.RFC3339))
	}

	start = time.Now()
	createDatabase(t, ns, "ledger-then", func(db *v1alpha1.Database) {
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "ledger-backup"}, TargetTime: &metav1.Time{Time: target}}}
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
	})
	waitDatabase(t, ns, "ledger-then", 4*time.Minute, "Ready at the target time", isReady(1, ""))
	t.Logf("recovered to %s, Ready in %s", target.Format(time.RFC3339), time.Since(start).Round(100*time.Millisecond))
	psqlPod(t, ns, "psql-then", "ledger-then")
	if got := sql(t, ns, "psql-then", "ledger-then-rw", "SELECT count(*) || ':' || max(id) FROM entries"); got != "300:300" {
		t.Fatalf("recovered to %s: rows %s, want 300:300 (those committed before the target, across the failover)", target.Format(time.RFC3339), got)
	}
	checkNoStaticKeys(t, ns, "s3", "ledger-then-0")

	// The base backup was proven meanwhile: restored into a throwaway
	// Database through the archive to its end, and checked.
	verified := waitBackup(t, ns, "ledger-backup", 5*time.Minute, "the base backup verified", func(b *v1alpha1.DatabaseBackup) bool {
		lv := b.Status.LastVerification
		if lv != nil && lv.Result == v1alpha1.VerificationFailed {
			t.Fatalf("verification of base backup %s failed: %s", lv.BackupID, lv.Message)
		}
		return lv != nil && meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.ConditionVerified)
	})
	t.Logf("verified base backup %s: restored in %ds", verified.Status.LastVerification.BackupID, verified.Status.LastVerification.RestoreSeconds)

	// The managed DatabaseBackup goes with its Database.
	if err := cluster.Client.Delete(context.Background(), &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "ledger-backup deleted with its Database", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ledger-backup"}, &v1alpha1.DatabaseBackup{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// checkNoStaticKeys fails if a pod in ns other than MinIO reads Secret
// keys (env or volume), and unless pod (a restored instance) carries a
// token of MinIO's audience.
func checkNoStaticKeys(t *testing.T, ns, keys, pod string) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cluster.Client.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for _, p := range pods.Items {
		if p.Labels["app"] == "minio" {
			continue
		}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == keys {
					t.Errorf("%s/%s reads Secret %s", p.Name, c.Name, keys)
				}
			}
		}
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == keys {
				t.Errorf("%s mounts Secret %s", p.Name, keys)
			}
			if v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && src.Secret.Name == keys {
					t.Errorf("%s projects Secret %s", p.Name, keys)
				}
				if tok := src.ServiceAccountToken; tok != nil && tok.Audience == minioSTSAudience && p.Name == pod {
					tokens++
				}
			}
		}
	}
	if tokens == 0 {
		t.Errorf("%s carries no token of audience %s", pod, minioSTSAudience)
	}
	t.Logf("%d pods read no static storage key", len(pods.Items)-1)
}
