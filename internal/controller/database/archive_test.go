package database_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func physicalBackup(ns, name, db string) *v1alpha1.DatabaseBackup {
	return &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: db},
			Method:      v1alpha1.BackupMethodPhysical,
			Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "wal",
				CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3", AccessKeyIDKey: "id", SecretAccessKeyKey: "key"}}},
		},
	}
}

// A Physical DatabaseBackup turns archiving on: the ConfigMap says where,
// the S3 keys are projected under the names the instance manager reads,
// and the pod template changes (archive_mode takes a restart). Deleting it
// turns archiving off the same way. A second one archives nothing, and the
// condition says so.
func TestPhysicalBackupTurnsArchivingOn(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "ledger"))
	eventually(t, "the StatefulSet", func() (bool, error) {
		_, err := get(ns, "ledger", &appsv1.StatefulSet{})
		return err == nil, nil
	})
	before, _ := get(ns, "ledger", &appsv1.StatefulSet{})
	if _, ok := before.Spec.Template.Annotations["daytwo.dev/archive"]; ok {
		t.Fatal("a Database without a Physical backup has an archive annotation")
	}
	create(t, physicalBackup(ns, "ledger-pitr", "ledger"))
	var conf instanceapi.Archive
	eventually(t, "archive.json in the ConfigMap", func() (bool, error) {
		cm, err := get(ns, "ledger-config", &corev1.ConfigMap{})
		if err != nil || cm.Data[instanceapi.ArchiveFile] == "" {
			return false, nil
		}
		return true, json.Unmarshal([]byte(cm.Data[instanceapi.ArchiveFile]), &conf)
	})
	if conf.S3 == nil || conf.S3.Bucket != "wal" || conf.S3.Endpoint != "minio:9000" || conf.Prefix != ns+"/ledger-pitr/" {
		t.Fatalf("archive.json = %+v", conf)
	}
	var sts *appsv1.StatefulSet
	eventually(t, "the pod template marked and given the keys", func() (bool, error) {
		var err error
		sts, err = get(ns, "ledger", &appsv1.StatefulSet{})
		return err == nil && sts.Spec.Template.Annotations["daytwo.dev/archive"] == "s3://minio:9000/wal/"+ns+"/ledger-pitr/", err
	})
	items := map[string]string{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret != nil && src.Secret.Name == "s3" {
				for _, it := range src.Secret.Items {
					items[it.Key] = it.Path
				}
			}
		}
	}
	if items["id"] != instanceapi.SecretArchiveAccessKeyID || items["key"] != instanceapi.SecretArchiveSecretAccessKey {
		t.Fatalf("projected S3 keys = %v", items)
	}
	waitCondition(t, ns, "ledger", v1alpha1.ConditionContinuousArchiving, metav1.ConditionFalse, v1alpha1.ReasonArchivingStarting)

	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp
	create(t, physicalBackup(ns, "ledger-second", "ledger"))
	eventually(t, "the condition naming the second one", func() (bool, error) {
		db, err := get(ns, "ledger", &v1alpha1.Database{})
		c := condition(db, v1alpha1.ConditionContinuousArchiving)
		return err == nil && c != nil && strings.Contains(c.Message, "ledger-second also asks for it"), err
	})

	for _, name := range []string{"ledger-pitr", "ledger-second"} {
		if err := env.Client.Delete(ctx, &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "archiving off", func() (bool, error) {
		cm, err := get(ns, "ledger-config", &corev1.ConfigMap{})
		s, err2 := get(ns, "ledger", &appsv1.StatefulSet{})
		db, err3 := get(ns, "ledger", &v1alpha1.Database{})
		if err != nil || err2 != nil || err3 != nil {
			return false, nil
		}
		_, marked := s.Spec.Template.Annotations["daytwo.dev/archive"]
		return cm.Data[instanceapi.ArchiveFile] == "" && !marked && condition(db, v1alpha1.ConditionContinuousArchiving) == nil, nil
	})
}

// A recovery target on a Logical backup is refused, naming the field.
func TestRecoveryTargetNeedsAPhysicalBackup(t *testing.T) {
	ns := env.Namespace(t)
	b := physicalBackup(ns, "dumps", "ledger")
	b.Spec.Method = v1alpha1.BackupMethodLogical
	create(t, b)
	create(t, newDB(ns, "then", func(d *v1alpha1.Database) {
		d.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "dumps"}, TargetLSN: "0/3000060"}}
	}))
	db := waitCondition(t, ns, "then", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRestoreFailed)
	if c := condition(db, v1alpha1.ConditionReady); !strings.Contains(c.Message, "spec.bootstrap.fromBackup") || !strings.Contains(c.Message, "Physical") {
		t.Fatalf("Ready = %s", c.Message)
	}
}

// A Database bootstrapped from a Physical backup with a target recovers
// to it: the restore init container gets the physical restore, the target
// and the storage's keys; the postgres container gets none of them.
func TestPhysicalRestorePassesTheTarget(t *testing.T) {
	ns := env.Namespace(t)
	create(t, physicalBackup(ns, "wal", "ledger"))
	at := metav1.NewTime(time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC))
	create(t, newDB(ns, "then", func(d *v1alpha1.Database) {
		d.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{
			BackupRef: v1alpha1.LocalObjectReference{Name: "wal"}, TargetTime: &at}}
	}))
	var pod corev1.PodSpec
	eventually(t, "the StatefulSet", func() (bool, error) {
		sts, err := get(ns, "then", &appsv1.StatefulSet{})
		if err != nil {
			return false, nil
		}
		pod = sts.Spec.Template.Spec
		return true, nil
	})
	if n := len(pod.InitContainers); n != 2 || pod.InitContainers[1].Name != "restore" {
		t.Fatalf("init containers %d, the last %q; want the restore after the binary's copy", n, pod.InitContainers[n-1].Name)
	}
	restore, postgres := pod.InitContainers[1], pod.Containers[0]
	joined := strings.Join(restore.Args, " ")
	for _, want := range []string{"--bootstrap-only", "--from-backup", "--restore-physical", "--recovery-target-time=2026-11-24T07:00:00Z",
		"--restore-prefix=" + ns + "/wal/", "--tls", "--lease="} {
		if !strings.Contains(joined, want) {
			t.Errorf("the restore init container's args lack %s: %s", want, joined)
		}
	}
	if restore.ReadinessProbe != nil || restore.LivenessProbe != nil || len(restore.Ports) > 0 {
		t.Errorf("the restore init container has probes or ports")
	}
	storageKeys := func(c corev1.Container) (names []string) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "s3" {
				names = append(names, e.Name)
			}
		}
		return names
	}
	if got := storageKeys(restore); len(got) != 2 {
		t.Errorf("the restore init container gets the storage's keys as %v; want both", got)
	}
	if got := storageKeys(postgres); len(got) != 0 {
		t.Errorf("the postgres container gets the storage's keys: %v", got)
	}
	if joined := strings.Join(postgres.Args, " "); !strings.Contains(joined, "--from-backup") ||
		strings.Contains(joined, "--restore-prefix") || strings.Contains(joined, "--restore-physical") {
		t.Errorf("the postgres container's args: %s; want --from-backup and no storage", joined)
	}
}
