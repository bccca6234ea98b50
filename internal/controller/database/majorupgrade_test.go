package database_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

// upgradeJobOf waits for the upgrade Job the operator makes once every
// instance is stopped (envtest runs no pods, so that is at once).
func upgradeJobOf(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	eventually(t, "the upgrade Job", func() (bool, error) {
		j, err := get(ns, name+"-upgrade", &batchv1.Job{})
		job = j
		return err == nil, client.IgnoreNotFound(err)
	})
	return job
}

// finishJob writes the terminal status the Job controller would.
func finishJob(t *testing.T, job *batchv1.Job, ok bool) {
	t.Helper()
	testenv.FinishJob(job, metav1.Now(), ok)
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}

func TestMajorUpgradeSucceeds(t *testing.T) {
	ns := env.Namespace(t)
	// A succeeded upgrade Job of an earlier attempt whose deletion failed:
	// it must never pass for this attempt's.
	stale := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "modern-upgrade"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if err := env.Client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	finishJob(t, stale, true)
	db := newDB(ns, "modern")
	create(t, db)
	waitStatefulSet(t, ns, "modern")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Version = "17" })
	var job *batchv1.Job
	eventually(t, "this attempt's Job, not the stale one", func() (bool, error) {
		j, err := get(ns, "modern-upgrade", &batchv1.Job{})
		job = j
		return err == nil && j.UID != stale.UID && j.Annotations["daytwo.dev/upgrading"] == "15-17", client.IgnoreNotFound(err)
	})
	if sts, _ := get(ns, "modern", &appsv1.StatefulSet{}); sts.Annotations["daytwo.dev/major"] != "15" {
		t.Fatalf("the stale Job finished the upgrade: annotations %v", sts.Annotations)
	}
	finishJob(t, job, true)
	eventually(t, "the instances on the new image", func() (bool, error) {
		sts, err := get(ns, "modern", &appsv1.StatefulSet{})
		return err == nil && *sts.Spec.Replicas == 1 && sts.Spec.Template.Spec.Containers[0].Image == postgres.DefaultImage("17") &&
			sts.Annotations["daytwo.dev/major"] == "17" && sts.Annotations["daytwo.dev/upgrading"] == "", err
	})
	eventually(t, "status.upgrade Starting", func() (bool, error) {
		d, err := get(ns, "modern", &v1alpha1.Database{})
		return err == nil && d.Status.Upgrade != nil && d.Status.Upgrade.Phase == v1alpha1.MajorUpgradeStarting, err
	})
}
