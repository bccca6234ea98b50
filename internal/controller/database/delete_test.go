package database_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
)

func TestDeletionPolicies(t *testing.T) {
	t.Run("Delete removes the volumes", func(t *testing.T) {
		ns := env.Namespace(t)
		db := newDB(ns, "gone", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete })
		create(t, db)
		waitCondition(t, ns, "gone", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "gone", "standard", "1Gi")
		if err := env.Client.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Database gone and its volume deleted", func() (bool, error) {
			_, err := get(ns, "gone", &v1alpha1.Database{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
			pvc, err := get(ns, "pgdata-gone-0", &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
		})
	})
	t.Run("Retain keeps the volumes and the Secret", func(t *testing.T) {
		ns := env.Namespace(t)
		db := newDB(ns, "kept")
		create(t, db)
		waitCondition(t, ns, "kept", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "kept", "standard", "1Gi")
		secret, _ := get(ns, "kept-credentials", &corev1.Secret{})
		if _, err := get(ns, "kept-ca", &corev1.Secret{}); err != nil {
			t.Fatalf("no CA: %v", err)
		}
		if err := env.Client.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Database gone", func() (bool, error) {
			_, err := get(ns, "kept", &v1alpha1.Database{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		pvc, err := get(ns, "pgdata-kept-0", &corev1.PersistentVolumeClaim{})
		if err != nil || !pvc.DeletionTimestamp.IsZero() {
			t.Fatalf("the volume was not kept: %v", err)
		}
		for _, name := range []string{"kept-credentials", "kept-ca"} {
			s, err := get(ns, name, &corev1.Secret{})
			if err != nil || len(s.OwnerReferences) != 0 {
				t.Fatalf("Secret %s was not released: %v %v", name, err, s.OwnerReferences)
			}
		}
		eventually(t, "a Retained event", func() (bool, error) {
			list := &corev1.EventList{}
			err := env.Client.List(ctx, list, client.InNamespace(ns))
			for _, e := range list.Items {
				if e.Reason == "Retained" && strings.Contains(e.Message, "pgdata-kept-0") && strings.Contains(e.Message, "kept-credentials") {
					return true, nil
				}
			}
			return false, err
		})
		// Created again, the Database takes the kept Secret back unchanged.
		create(t, newDB(ns, "kept"))
		eventually(t, "the Secret taken back", func() (bool, error) {
			s, err := get(ns, "kept-credentials", &corev1.Secret{})
			return err == nil && metav1.GetControllerOf(s) != nil, err
		})
		s, _ := get(ns, "kept-credentials", &corev1.Secret{})
		if string(s.Data["password"]) != string(secret.Data["password"]) {
			t.Fatal("the kept password was replaced")
		}
	})
	t.Run("Snapshot is refused without backup storage", func(t *testing.T) {
		ns := env.Namespace(t)
		err := env.Client.Create(ctx, newDB(ns, "snap", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot }))
		if err == nil || !strings.Contains(err.Error(), "backupStorage") {
			t.Fatalf("created without backup storage: %v", err)
		}
	})
	t.Run("Snapshot takes a final backup first", func(t *testing.T) {
		ns := env.Namespace(t)
		db := newDB(ns, "snap", func(d *v1alpha1.Database) {
			d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot
			d.Spec.BackupStorage = &v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}
		})
		create(t, db)
		waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "snap", "standard", "1Gi")
		if err := env.Client.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		db = waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting)
		if db.Status.Phase != v1alpha1.DatabasePhaseDeleting || !strings.Contains(condition(db, v1alpha1.ConditionReady).Message, "snap-final") {
			t.Errorf("phase %s, %+v", db.Status.Phase, condition(db, v1alpha1.ConditionReady))
		}
		final, err := get(ns, "snap-final", &v1alpha1.DatabaseBackup{})
		if err != nil {
			t.Fatalf("no final DatabaseBackup: %v", err)
		}
		if final.Spec.DatabaseRef.Name != "snap" || final.Spec.Storage.PVC == nil || final.Spec.Schedule != "" || len(final.OwnerReferences) != 0 {
			t.Errorf("final DatabaseBackup spec %+v owners %v", final.Spec, final.OwnerReferences)
		}
		// Play the backup Job's success: the Database then lets go, volumes included.
		storeRequestedBackup(t, final)
		eventually(t, "the Database gone and its volume deleted", func() (bool, error) {
			_, err := get(ns, "snap", &v1alpha1.Database{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
			pvc, err := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
		})
		if _, err := get(ns, "snap-final", &v1alpha1.DatabaseBackup{}); err != nil {
			t.Errorf("the final DatabaseBackup did not outlive the Database: %v", err)
		}

		// A Database of the same name (restored from snap-final, say) and
		// deleted again: the earlier final backup does not count for it.
		// envtest runs no garbage collector or Job controller: play their
		// part for the first Database and its (never finishing) backup Job.
		jobs := &batchv1.JobList{}
		if err := env.Client.List(ctx, jobs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range jobs.Items {
			_ = env.Client.Delete(ctx, &jobs.Items[i], client.PropagationPolicy(metav1.DeletePropagationBackground))
		}
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-credentials"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-replication"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-config"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-rw"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-ro"}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance-api"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-ca"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-server-tls"}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-primary"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance"}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance"}},
		} {
			_ = env.Client.Delete(ctx, obj)
		}
		pvc, _ := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{})
		update(t, pvc, func(p *corev1.PersistentVolumeClaim) { p.Finalizers = nil })
		eventually(t, "the first volume gone", func() (bool, error) {
			_, err := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		again := newDB(ns, "snap", func(d *v1alpha1.Database) {
			d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot
			d.Spec.BackupStorage = &v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}
		})
		create(t, again)
		waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "snap", "standard", "1Gi")
		// Deletion times have whole seconds; this one must differ from the first.
		for firstAsked, _ := time.Parse(time.RFC3339, final.Annotations[v1alpha1.AnnotationBackupRequested]); time.Now().Unix() <= firstAsked.Unix()+1; {
			time.Sleep(100 * time.Millisecond)
		}
		if err := env.Client.Delete(ctx, again); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the final DatabaseBackup asked for a run for the new Database", func() (bool, error) {
			final, err := get(ns, "snap-final", &v1alpha1.DatabaseBackup{})
			return err == nil && final.Annotations[v1alpha1.AnnotationFinalBackupOfUID] == string(again.UID) &&
				final.Annotations[v1alpha1.AnnotationBackupRequested] != "", err
		})
		final, _ = get(ns, "snap-final", &v1alpha1.DatabaseBackup{})
		requested, _ := time.Parse(time.RFC3339, final.Annotations[v1alpha1.AnnotationBackupRequested])
		eventually(t, "a backup Job for the requested run", func() (bool, error) {
			jobs := &batchv1.JobList{}
			err := env.Client.List(ctx, jobs, client.InNamespace(ns))
			for _, j := range jobs.Items {
				if j.Name == fmt.Sprintf("snap-final-%d", requested.Unix()) {
					return true, nil
				}
			}
			return false, err
		})
		waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting)
		if pvc, err := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{}); err != nil || !pvc.DeletionTimestamp.IsZero() {
			t.Fatalf("the volume went before the new final backup: %v", err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(final), final); err != nil {
				return err
			}
			final.Status.LastBackupTime = &metav1.Time{Time: time.Now()}
			final.Status.Backups = []v1alpha1.StoredBackup{{ID: backup.NewID(requested), Time: metav1.Now(), SizeBytes: 1, SHA256: "y"}}
			return env.Client.Status().Update(ctx, final)
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the second Database gone after its own final backup", func() (bool, error) {
			_, err := get(ns, "snap", &v1alpha1.Database{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
}
