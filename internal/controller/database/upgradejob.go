package database

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

type jobState int

// jobStateOf reads a Job's outcome.
func jobStateOf(j *batchv1.Job) jobState {
	if j == nil {
		return jobNone
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return jobSucceeded
		case batchv1.JobFailed:
			return jobFailed
		}
	}
	return jobRunning
}

func upgradeJobName(db *v1alpha1.Database) string { return db.Name + "-upgrade" }

// runUpgradeJob waits for every instance to stop, then makes this
// attempt's Job (after removing another attempt's).
func (r *Reconciler) runUpgradeJob(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	u := db.Status.Upgrade
	if len(obs.Pods) > 0 {
		if u != nil && u.Phase == v1alpha1.MajorUpgradeStopping {
			u.Message = "stopping every instance; still running: " + strings.Join(ha.PodNames(obs.Pods), ", ")
		}
		return nil
	}
	if obs.found.staleJob {
		return r.deleteUpgradeJob(ctx, db)
	}
	if obs.upgradeJob == nil {
		if err := controller.Apply(ctx, r.Client, upgradeJob(db, obs.plan, obs.found.in, obs.found.templateImage, obs.plan.image), "Job"); err != nil {
			return err
		}
	}
	if u != nil && u.Phase == v1alpha1.MajorUpgradeStopping {
		u.Phase, u.Message = v1alpha1.MajorUpgradeUpgrading, "pg_upgrade runs in Job "+upgradeJobName(db)
	}
	return nil
}

// upgradeJobEnded records the Job's outcome: the instances start on the
// new version, or on the old one with the reason and a Warning Event.
func (r *Reconciler) upgradeJobEnded(ctx context.Context, db *v1alpha1.Database, obs *observation) {
	u := db.Status.Upgrade
	if u == nil {
		return
	}
	u.Phase, u.To = v1alpha1.MajorUpgradeStarting, obs.found.upgradeTo
	if obs.found.upgradeAction == upgradeFinish {
		u.Message = "the primary's data is upgraded; the instances start on PostgreSQL " + u.To
		return
	}
	u.Message = r.upgradeJobError(ctx, db, obs.upgradeJob)
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, v1alpha1.ReasonMajorUpgradeFailed, "Upgrade",
		"Upgrading PostgreSQL %s to %s failed, starting %s again on the data as it was: %s", u.From, u.To, u.From, u.Message)
}

// deleteUpgradeJob removes the upgrade Job and, in the background, its pod.
func (r *Reconciler) deleteUpgradeJob(ctx context.Context, db *v1alpha1.Database) error {
	err := r.Client.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: upgradeJobName(db)}},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}

// upgradeJobError is why the upgrade Job failed: the instance manager's
// termination message, or the Job's own condition.
func (r *Reconciler) upgradeJobError(ctx context.Context, db *v1alpha1.Database, job *batchv1.Job) string {
	// Read from the API: the cache holds instance pods only.
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels{labelUpgrade: db.Name}); err == nil {
		for _, p := range pods.Items {
			for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
					msg := strings.TrimSpace(t.Message)
					if msg == "" {
						msg = t.Reason
					}
					return fmt.Sprintf("container %s: %s", cs.Name, msg)
				}
			}
		}
	}
	if job != nil {
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobFailed {
				return c.Reason + ": " + c.Message
			}
		}
	}
	return "the upgrade Job failed"
}

// labelUpgrade marks the upgrade Job's pod (never an instance: it must not
// match the StatefulSet's selector).
const labelUpgrade = "daytwo.dev/upgrade-of"

// upgradeJob runs the instance manager's upgrade on the primary's volume:
// the pod template's volumes and settings, the new image, and an init
// container of the old image that bundles its programs.
func upgradeJob(db *v1alpha1.Database, p plan, in stsInputs, oldImage, newImage string) *batchv1ac.JobApplyConfiguration {
	in.image = newImage
	// The data exists: nothing to restore, and no storage credentials.
	in.restore = nil
	tpl := podTemplate(db, p, in)
	spec := tpl.Spec
	spec.WithRestartPolicy(corev1.RestartPolicyNever)
	pg := &spec.Containers[0]
	pg.Args = append([]string{"instance", "run"}, instanceapi.RunFlags{UpgradeOnly: true, Role: instanceapi.RolePrimary,
		TerminationLog: "/dev/termination-log", Cluster: db.Name, Pod: podName(db, 0), PGData: instanceapi.PGData,
		RunDir: instanceapi.RunDir, DatabaseUID: string(db.UID), UpgradeFrom: upgradeMount, TLS: true}.Args()...)
	pg.LivenessProbe, pg.ReadinessProbe, pg.StartupProbe, pg.Lifecycle, pg.Ports = nil, nil, nil, nil, nil
	pg.WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError)
	pg.WithVolumeMounts(corev1ac.VolumeMount().WithName(volumeUpgrade).WithMountPath(upgradeMount))
	spec.WithInitContainers(corev1ac.Container().
		WithName(containerBundle).
		WithImage(oldImage).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(instanceapi.Binary, "instance", "bundle", "--major", in.major, upgradeMount).
		// Its error, on stderr, is the message status.upgrade shows.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("controller").WithMountPath(controllerMount),
			corev1ac.VolumeMount().WithName(volumeUpgrade).WithMountPath(upgradeMount)))
	spec.WithVolumes(
		corev1ac.Volume().WithName(volumeUpgrade).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName(volumeData).WithPersistentVolumeClaim(
			corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(pvcName(db, 0))))
	l := labels(db)
	delete(l, labelDatabase)
	l[labelUpgrade] = db.Name
	tpl.Labels = nil
	tpl.WithLabels(l)
	return batchv1ac.Job(upgradeJobName(db), db.Namespace).
		WithLabels(l).
		// The attempt it serves: a Job of another one is never taken for it.
		WithAnnotations(map[string]string{annUpgrading: in.upgrading}).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(batchv1ac.JobSpec().
			WithBackoffLimit(0).
			WithActiveDeadlineSeconds(int64(upgradeJobDeadline.Seconds())).
			WithTemplate(tpl))
}

const (
	jobNone jobState = iota
	jobRunning
	jobSucceeded
	jobFailed
)
