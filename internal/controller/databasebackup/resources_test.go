package databasebackup

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Every Job daytwo creates is bounded in time, and every container in it
// has requests and limits: a stuck or runaway run cannot hold a schedule
// or a node for good.
func TestJobsAreBounded(t *testing.T) {
	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "uid-1"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Storage:     v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}},
			Verify:      &v1alpha1.BackupVerify{EveryNth: ptr.To[int32](1)},
		},
	}
	in := jobInputs{image: "postgres:15", instanceImage: "daytwo:dev", credentials: "orders-credentials"}
	backupRun := backupJob(b, in, time.Unix(1700000000, 0))
	check := checkJob(b, "nightly-check", "orders-credentials", "daytwo:dev")
	if d := backupRun.Spec.ActiveDeadlineSeconds; d == nil || *d != int64(DefaultActiveDeadline.Seconds()) {
		t.Errorf("backup Job deadline %v, want the %s default", d, DefaultActiveDeadline)
	}
	b.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
	if d := backupJob(b, in, time.Unix(1700000000, 0)).Spec.ActiveDeadlineSeconds; d == nil || *d != 600 {
		t.Errorf("backup Job deadline %v, want spec's 600", d)
	}
	if d := check.Spec.ActiveDeadlineSeconds; d == nil || *d <= 0 {
		t.Errorf("check Job deadline %v", d)
	}
	for _, job := range []struct {
		name string
		pod  corev1.PodSpec
	}{{"backup", backupRun.Spec.Template.Spec}, {"check", check.Spec.Template.Spec}} {
		for _, c := range append(job.pod.InitContainers, job.pod.Containers...) {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[r]; !ok {
					t.Errorf("%s Job container %s requests no %s", job.name, c.Name, r)
				}
				if _, ok := c.Resources.Limits[r]; !ok {
					t.Errorf("%s Job container %s has no %s limit", job.name, c.Name, r)
				}
			}
		}
	}
}

// A Physical run streams a base backup from the primary as the
// replication role, whose password comes from the Database's Secret.
func TestPhysicalJobUsesTheReplicationRole(t *testing.T) {
	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "wal", UID: "uid-1"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "ledger"},
			Method:      v1alpha1.BackupMethodPhysical,
			Storage:     v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}},
		},
	}
	job := backupJob(b, jobInputs{image: "postgres:15", instanceImage: "daytwo", credentials: "ledger-credentials",
		replication: "ledger-replication", primary: "ledger-rw"}, time.Now())
	c := job.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--physical") {
		t.Errorf("args %v lack --physical", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			env[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		} else {
			env[e.Name] = e.Value
		}
	}
	if env["PGHOST"] != "ledger-rw" || env["PGUSER"] != "streaming_replica" || env["PGPASSWORD"] != "ledger-replication/password" {
		t.Errorf("env %v", env)
	}
	if _, ok := env["PGDATABASE"]; ok {
		t.Errorf("a physical run reads the application credentials: %v", env)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--switch-wal-host") }) {
		t.Errorf("a backup from the primary asks for WAL switches: %v", c.Args)
	}

	// With a streaming replica, from the replicas' Service, or the
	// primary's when no replica answers.
	job = backupJob(b, jobInputs{image: "postgres:15", instanceImage: "daytwo", credentials: "ledger-credentials",
		replication: "ledger-replication", primary: "ledger-rw", replicas: "ledger-ro"}, time.Now())
	c = job.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if e.Name == "PGHOST" && e.Value != "ledger-ro,ledger-rw" {
			t.Errorf("PGHOST = %s, want ledger-ro,ledger-rw", e.Value)
		}
	}
	if !slices.Contains(c.Args, "--switch-wal-host=ledger-rw") {
		t.Errorf("args %v lack --switch-wal-host=ledger-rw", c.Args)
	}
}

// A Logical run compresses as its spec says, and with the default when it
// says nothing (the flag's default in `daytwo backup run`).
func TestLogicalJobCompressesAsTheSpecSays(t *testing.T) {
	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "uid-1"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Storage:     v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}},
		},
	}
	in := jobInputs{image: "postgres:15", instanceImage: "daytwo", credentials: "orders-credentials"}
	args := backupJob(b, in, time.Now()).Spec.Template.Spec.Containers[0].Args
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--compression") }) {
		t.Errorf("no compression in the spec, yet args %v", args)
	}
	b.Spec.Compression, b.Spec.CompressionLevel = v1alpha1.CompressionGzip, ptr.To[int32](4)
	args = backupJob(b, in, time.Now()).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--compression=gzip") || !slices.Contains(args, "--compression-level=4") {
		t.Errorf("args %v lack gzip level 4", args)
	}
}

// Between runs, a Physical series' lastPoint follows what the Database
// archives to it, and only to it, and only forward.
func TestLastPointFollowsTheArchive(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: v1alpha1.DatabaseBackupSpec{Method: v1alpha1.BackupMethodPhysical}}
	b.Status.Recoverability = &v1alpha1.Recoverability{FirstPoint: metav1.Time{Time: t0}, LastPoint: metav1.Time{Time: t0.Add(time.Hour)}}
	db := &v1alpha1.Database{}
	archived := func(backup string, at time.Time) {
		db.Status.WALArchive = &v1alpha1.WALArchiveStatus{Backup: backup, LastArchivedWAL: "000000010000000000000009", LastArchivedTime: &metav1.Time{Time: at}}
		liftLastPoint(b, db)
	}
	archived("weekly", t0.Add(3*time.Hour))
	archived("nightly", t0.Add(30*time.Minute))
	if got := b.Status.Recoverability.LastPoint.Time; !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("lastPoint %s after another backup's archive and an older one", got)
	}
	archived("nightly", t0.Add(2*time.Hour))
	if got := b.Status.Recoverability.LastPoint.Time; !got.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("lastPoint %s, want %s", got, t0.Add(2*time.Hour))
	}
	b.Spec.Method = v1alpha1.BackupMethodLogical
	archived("nightly", t0.Add(5*time.Hour))
	if got := b.Status.Recoverability.LastPoint.Time; !got.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("a Logical series' lastPoint followed the WAL archive: %s", got)
	}
}

// A backup Job's pod runs where its Database's pods run, pulls with their
// Secrets and carries their annotations (not their labels), and runs as the
// Database's ServiceAccount when the storage is reached with its identity.
func TestBackupJobFollowsItsDatabasesShape(t *testing.T) {
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"}, Spec: v1alpha1.DatabaseSpec{
		Placement: &v1alpha1.DatabasePlacement{Placement: v1alpha1.Placement{NodeSelector: map[string]string{"pool": "db"},
			Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}},
		InheritedMetadata: &v1alpha1.PodMetadata{Labels: map[string]string{"team": "shop"}, Annotations: map[string]string{"cost-center": "7"}},
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "registry"}},
	}}
	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly"}, Spec: v1alpha1.DatabaseBackupSpec{
		DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
		Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "s3.amazonaws.com", Bucket: "b",
			WebIdentity: &v1alpha1.S3WebIdentity{RoleARN: "arn:aws:iam::1:role/r"}}}}}
	job := backupJob(b, jobInputs{image: "postgres:17", instanceImage: "daytwo", credentials: "orders-credentials", shape: shapeOf(db)},
		time.Unix(1700000000, 0))
	pod := job.Spec.Template
	if pod.Spec.NodeSelector["pool"] != "db" || len(pod.Spec.Tolerations) != 1 || len(pod.Spec.ImagePullSecrets) != 1 ||
		pod.Labels["team"] != "" || pod.Annotations["cost-center"] != "7" || pod.Labels[labelBackup] != "nightly" || pod.Spec.ServiceAccountName != "orders-instance" ||
		ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		t.Errorf("the backup Job's pod: nodeSelector %v, tolerations %v, pull %v, labels %v, account %q, API token %v",
			pod.Spec.NodeSelector, pod.Spec.Tolerations, pod.Spec.ImagePullSecrets, pod.Labels, pod.Spec.ServiceAccountName,
			pod.Spec.AutomountServiceAccountToken)
	}
}
