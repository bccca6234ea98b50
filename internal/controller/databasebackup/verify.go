package databasebackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

const (
	labelVerify = "daytwo.dev/verify"
	// verifyDeadline bounds a verification: restore, readiness and check.
	verifyDeadline = 30 * time.Minute
	verifyPoll     = 15 * time.Second
)

// verifyName is the throwaway Database that proves b's newest backup restores.
func verifyName(b *v1alpha1.DatabaseBackup) string {
	name := b.Name + "-verify"
	if len(name) > 40 {
		sum := sha256.Sum256([]byte(b.Name))
		name = b.Name[:24] + "-" + hex.EncodeToString(sum[:4]) + "-verify"
	}
	return name
}

// reconcileVerification runs the verification state machine: start a
// throwaway Database from the newest backup when one is due, check it with
// the query once it is ready, record the result and the measured restore
// time, and delete the throwaway. It returns when to look again.
func (r *Reconciler) reconcileVerification(ctx context.Context, b *v1alpha1.DatabaseBackup, now time.Time) (time.Duration, error) {
	if b.Spec.Verify == nil {
		return 0, nil
	}
	db := &v1alpha1.Database{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: verifyName(b)}, db)
	if client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("failed to get the verification Database: %w", err)
	}
	if apierrors.IsNotFound(err) {
		return r.startVerificationIfDue(ctx, b, now)
	}
	if owner := metav1.GetControllerOf(db); owner == nil || owner.UID != b.UID {
		return 0, nil // not ours; never touch it
	}
	return r.progressVerification(ctx, b, db, now)
}

func (r *Reconciler) startVerificationIfDue(ctx context.Context, b *v1alpha1.DatabaseBackup, now time.Time) (time.Duration, error) {
	v := b.Spec.Verify
	wait := time.Duration(0)
	due := false
	if v.EveryNth != nil {
		due = b.Status.SuccessesSinceVerification >= *v.EveryNth
	} else if s, err := schedule.Parse(v.Schedule, ptrDeref(b.Spec.TimeZone)); err == nil {
		last := b.CreationTimestamp.Time
		if lv := b.Status.LastVerification; lv != nil {
			last = lv.Time.Time
		}
		d := schedule.Decide(s, last, now, schedule.RunOnce, 0)
		due, wait = !d.Due.IsZero(), d.Next.Sub(now)
	}
	if !due || len(b.Status.Backups) == 0 {
		return wait, nil
	}
	src := &v1alpha1.Database{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseRef.Name}, src); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	db := throwaway(b, src, b.Status.Backups[0].ID, now)
	if err := controllerutil.SetControllerReference(b, db, r.Client.Scheme()); err != nil {
		return 0, err
	}
	if err := r.Client.Create(ctx, db); client.IgnoreAlreadyExists(err) != nil {
		return 0, fmt.Errorf("failed to create the verification Database: %w", err)
	}
	setCondition(b, v1alpha1.ConditionVerified, false, v1alpha1.ReasonVerifying,
		fmt.Sprintf("Restoring backup %s into Database %s", b.Status.Backups[0].ID, db.Name))
	controller.Event(ctx, r.Recorder, b, db, corev1.EventTypeNormal, v1alpha1.ReasonVerifying, "Verify",
		"Restoring backup %s into Database %s to prove it", b.Status.Backups[0].ID, db.Name)
	return verifyPoll, nil
}

// throwaway is a one-instance Database restored from backup id.
func throwaway(b *v1alpha1.DatabaseBackup, src *v1alpha1.Database, id string, now time.Time) *v1alpha1.Database {
	mem := resource.MustParse("1Gi")
	return &v1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{
			Name: verifyName(b), Namespace: b.Namespace,
			Labels:      map[string]string{labelVerify: b.Name},
			Annotations: map[string]string{"daytwo.dev/verify-started": now.UTC().Format(time.RFC3339), "daytwo.dev/backup-id": id},
		},
		Spec: v1alpha1.DatabaseSpec{
			Version: src.Spec.Version, Image: src.Status.CurrentImage, Size: src.Spec.Size, Storage: src.Spec.Storage,
			Instances: ptr.To[int32](1),
			Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: mem},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
			},
			Bootstrap:      &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{BackupRef: v1alpha1.LocalObjectReference{Name: b.Name}, BackupID: id}},
			DeletionPolicy: v1alpha1.DatabaseDeletionDelete,
			// Where and how the source runs: its node pool, its pull
			// Secrets, and the annotations a cloud's workload identity
			// reads to reach the bucket. Not its labels: what selects the
			// source's pods by them must not find the throwaway's.
			Placement:         src.Spec.Placement.DeepCopy(),
			InheritedMetadata: annotationsOnly(src.Spec.InheritedMetadata),
			ImagePullSecrets:  src.Spec.ImagePullSecrets,
		},
	}
}

// progressVerification moves a verification under way forward.
func (r *Reconciler) progressVerification(ctx context.Context, b *v1alpha1.DatabaseBackup, db *v1alpha1.Database, now time.Time) (time.Duration, error) {
	id := db.Annotations["daytwo.dev/backup-id"]
	ready := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case ready != nil && ready.Reason == v1alpha1.ReasonRestoreFailed:
		return 0, r.finishVerification(ctx, b, db, now, id, 0, fmt.Errorf("restore failed: %s", ready.Message))
	case now.Sub(db.CreationTimestamp.Time) > verifyDeadline:
		return 0, r.finishVerification(ctx, b, db, now, id, 0, fmt.Errorf("not ready within %s", verifyDeadline))
	case ready == nil || ready.Status != metav1.ConditionTrue:
		return verifyPoll, nil
	}
	restore := ready.LastTransitionTime.Sub(db.CreationTimestamp.Time)
	job, err := r.checkJob(ctx, b, db)
	if err != nil || job == nil {
		return verifyPoll, err
	}
	_, done, ok := finishedAt(job)
	if !done {
		return verifyPoll, nil
	}
	res, err := r.result(ctx, job, ok) // `daytwo backup check` reports {"rows", "error"}
	if err != nil {
		return 0, err
	}
	var failure error
	if !ok {
		failure = fmt.Errorf("check query: %s", res.Error)
	}
	return 0, r.finishVerification(ctx, b, db, now, id, restore, failure)
}

// checkJob returns the check Job of the verification, creating it first.
func (r *Reconciler) checkJob(ctx context.Context, b *v1alpha1.DatabaseBackup, db *v1alpha1.Database) (*batchv1.Job, error) {
	name := db.Name + "-check-" + strconv.FormatInt(db.CreationTimestamp.Unix(), 10)
	job := &batchv1.Job{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, job)
	if err == nil || !apierrors.IsNotFound(err) {
		return job, client.IgnoreNotFound(err)
	}
	job = checkJob(b, name, db.CredentialsSecretName(), r.InstanceImage)
	if err := controllerutil.SetControllerReference(b, job, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, job); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("failed to create the check Job: %w", err)
	}
	return nil, nil
}

// checkJob runs `daytwo backup check` from the daytwo image against the
// throwaway Database, with its credentials and nothing of the storage's.
func checkJob(b *v1alpha1.DatabaseBackup, name, credentials, image string) *batchv1.Job {
	query := b.Spec.Verify.Query
	if query == "" {
		query = backup.DefaultCheckQuery
	}
	labels := map[string]string{labelVerify: b.Name, "app.kubernetes.io/managed-by": "daytwo"}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](1),
			ActiveDeadlineSeconds: ptr.To(int64(checkDeadline.Seconds())),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              podSecurity(),
					Containers: []corev1.Container{{
						Name: containerBackup, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command:                  []string{"/daytwo", "backup", "check", "--query=" + query},
						Env:                      libpqEnv(credentials),
						SecurityContext:          restricted(),
						Resources:                resources("10m", "64Mi", "500m", "256Mi"),
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
				},
			},
		},
	}
}

// finishVerification records the outcome and removes the throwaway.
func (r *Reconciler) finishVerification(ctx context.Context, b *v1alpha1.DatabaseBackup, db *v1alpha1.Database, now time.Time,
	id string, restore time.Duration, failure error) error {
	v := &v1alpha1.BackupVerification{Time: metav1.Time{Time: now}, BackupID: id, Result: v1alpha1.VerificationSucceeded,
		RestoreSeconds: int64(restore.Round(time.Second).Seconds())}
	if failure != nil {
		v.Result, v.Message = v1alpha1.VerificationFailed, controller.Truncate(failure.Error(), 512)
		setCondition(b, v1alpha1.ConditionVerified, false, v1alpha1.ReasonVerificationFailed,
			fmt.Sprintf("Backup %s did not verify: %s", id, v.Message))
		controller.Event(ctx, r.Recorder, b, db, corev1.EventTypeWarning, v1alpha1.ReasonVerificationFailed, "Verify", "Backup %s did not verify: %s", id, v.Message)
	} else {
		v.Message = fmt.Sprintf("Restored in %s and the check query passed", restore.Round(time.Second))
		setCondition(b, v1alpha1.ConditionVerified, true, v1alpha1.ReasonVerificationSucceeded,
			fmt.Sprintf("Backup %s restored in %ds at %s", id, v.RestoreSeconds, now.UTC().Format(time.RFC3339)))
		observeVerification(b, restore.Seconds())
		controller.Event(ctx, r.Recorder, b, db, corev1.EventTypeNormal, v1alpha1.ReasonVerificationSucceeded, "Verify",
			"Backup %s restored in %s and the check query passed", id, restore.Round(time.Second))
	}
	b.Status.LastVerification = v
	b.Status.SuccessesSinceVerification = 0
	if err := r.Client.Delete(ctx, db); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete the verification Database: %w", err)
	}
	jobs := &batchv1.JobList{}
	if err := r.Client.List(ctx, jobs, client.InNamespace(b.Namespace), client.MatchingLabels{labelVerify: b.Name}); err != nil {
		return err
	}
	for i := range jobs.Items {
		if err := r.Client.Delete(ctx, &jobs.Items[i], client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// annotationsOnly is m without its labels (nil for nil).
func annotationsOnly(m *v1alpha1.PodMetadata) *v1alpha1.PodMetadata {
	if m == nil || len(m.Annotations) == 0 {
		return nil
	}
	return &v1alpha1.PodMetadata{Annotations: maps.Clone(m.Annotations)}
}
