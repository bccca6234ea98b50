package database_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

func TestMajorUpgradeRunsAJobOnTheStoppedPrimary(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "legacy", func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](2) })
	create(t, db)
	waitStatefulSet(t, ns, "legacy")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Version = "17" })

	// Every instance stops, on the old image, and a Job upgrades the primary's volume.
	job := upgradeJobOf(t, ns, "legacy")
	sts, _ := get(ns, "legacy", &appsv1.StatefulSet{})
	if sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("the instances stop for the upgrade with claim retention %+v: their volumes would go with them",
			sts.Spec.PersistentVolumeClaimRetentionPolicy)
	}
	if *sts.Spec.Replicas != 0 || sts.Spec.Template.Spec.Containers[0].Image != postgres.DefaultImage("15") || sts.Annotations["daytwo.dev/upgrading"] != "15-17" {
		t.Fatalf("StatefulSet during the upgrade: replicas %d, image %s, annotations %v",
			*sts.Spec.Replicas, sts.Spec.Template.Spec.Containers[0].Image, sts.Annotations)
	}
	pod := job.Spec.Template.Spec
	if pod.InitContainers[len(pod.InitContainers)-1].Image != postgres.DefaultImage("15") || pod.Containers[0].Image != postgres.DefaultImage("17") {
		t.Errorf("Job images: old programs from %s, upgrade in %s", pod.InitContainers[len(pod.InitContainers)-1].Image, pod.Containers[0].Image)
	}
	if got := strings.Join(pod.InitContainers[len(pod.InitContainers)-1].Command, " "); !strings.Contains(got, "bundle --major 15") {
		t.Errorf("bundle command: %s", got)
	}
	if got := strings.Join(pod.Containers[0].Args, " "); !strings.Contains(got, "--upgrade-only") || !strings.Contains(got, "--upgrade-from=/upgrade") {
		t.Errorf("upgrade args: %s", got)
	}
	claim := ""
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if job.Annotations["daytwo.dev/upgrading"] != "15-17" {
		t.Errorf("the Job does not name its attempt: %v", job.Annotations)
	}
	if claim != "pgdata-legacy-0" || job.Spec.Template.Labels["daytwo.dev/database"] != "" || *job.Spec.BackoffLimit != 0 {
		t.Errorf("Job: claim %q, labels %v (must not select as an instance), backoff %d", claim, job.Spec.Template.Labels, *job.Spec.BackoffLimit)
	}
	d, _ := get(ns, "legacy", &v1alpha1.Database{})
	if u := d.Status.Upgrade; u == nil || u.From != "15" || u.To != "17" || u.StartTime == nil || d.Status.Phase != v1alpha1.DatabasePhaseUpgrading {
		t.Fatalf("status during the upgrade: phase %s, upgrade %+v", d.Status.Phase, d.Status.Upgrade)
	}

	// The Job fails: the instances come back on the old image, and the
	// version is held back until spec.version changes.
	finishJob(t, job, false)
	d = waitCondition(t, ns, "legacy", v1alpha1.ConditionUpgradeFailed, metav1.ConditionTrue, v1alpha1.ReasonMajorUpgradeFailed)
	sts, _ = get(ns, "legacy", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 2 || sts.Spec.Template.Spec.Containers[0].Image != postgres.DefaultImage("15") || sts.Annotations["daytwo.dev/upgrade-failed"] != "17/" {
		t.Fatalf("StatefulSet after the failed upgrade: replicas %d, image %s, annotations %v",
			*sts.Spec.Replicas, sts.Spec.Template.Spec.Containers[0].Image, sts.Annotations)
	}
	if u := d.Status.Upgrade; u == nil || !strings.Contains(u.Message, "backoff limit") || d.Status.CurrentVersion != "15" {
		t.Fatalf("status after the failed upgrade: version %s, upgrade %+v", d.Status.CurrentVersion, d.Status.Upgrade)
	}
	eventually(t, "the failed Job removed", func() (bool, error) {
		j, err := get(ns, "legacy-upgrade", &batchv1.Job{})
		return apierrors.IsNotFound(err) || (err == nil && !j.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
	})
	eventually(t, "the failed Job gone", func() (bool, error) {
		_, err := get(ns, "legacy-upgrade", &batchv1.Job{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	// The retry annotation tries again.
	update(t, d, func(d *v1alpha1.Database) {
		d.Annotations = map[string]string{v1alpha1.AnnotationRetryUpgrade: "1"}
	})
	upgradeJobOf(t, ns, "legacy")
}
