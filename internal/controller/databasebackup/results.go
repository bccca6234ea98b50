package databasebackup

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// ownedJobs lists b's backup Jobs, oldest scheduled first.
func (r *Reconciler) ownedJobs(ctx context.Context, b *v1alpha1.DatabaseBackup) ([]batchv1.Job, error) {
	list := &batchv1.JobList{}
	if err := r.Client.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingLabels{labelBackup: b.Name}); err != nil {
		return nil, fmt.Errorf("failed to list Jobs: %w", err)
	}
	jobs := slices.DeleteFunc(list.Items, func(j batchv1.Job) bool {
		owner := metav1.GetControllerOf(&j)
		return owner == nil || owner.UID != b.UID
	})
	slices.SortFunc(jobs, func(a, b batchv1.Job) int { return scheduledOf(&a).Compare(scheduledOf(&b)) })
	return jobs, nil
}

func scheduledOf(j *batchv1.Job) time.Time {
	n, _ := strconv.ParseInt(j.Labels[labelScheduled], 10, 64)
	return time.Unix(n, 0).UTC()
}

// finishedAt returns when a Job succeeded or failed for good.
func finishedAt(j *batchv1.Job) (time.Time, bool, bool) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return c.LastTransitionTime.Time, true, true
		case batchv1.JobFailed:
			return c.LastTransitionTime.Time, true, false
		}
	}
	return time.Time{}, false, false
}

func activeJobs(jobs []batchv1.Job) []*batchv1.Job {
	var out []*batchv1.Job
	for i := range jobs {
		if _, done, _ := finishedAt(&jobs[i]); !done && jobs[i].DeletionTimestamp.IsZero() {
			out = append(out, &jobs[i])
		}
	}
	return out
}

// annRecorded marks a finished Job whose result is recorded: status,
// metrics and Events happen once per run, whatever the cache shows and
// however many operators look.
const annRecorded = "daytwo.dev/recorded"

// recordFinished records each finished Job that is not marked recorded yet.
// The mark is claimed first, with the Job's resourceVersion as a
// precondition, so of two reconciles (a stale cache, a second operator)
// only one counts a run (counters, Events, the failure metric): at most
// once, never twice. What a run leaves in the status (the newest backup,
// the retained list, LastRunFailed) is re-derived from a recorded Job the
// status has not caught up with yet, so a status write lost after a claim
// does not lose the run: a Snapshot deletion waiting for its final backup
// still sees it.
func (r *Reconciler) recordFinished(ctx context.Context, b *v1alpha1.DatabaseBackup, jobs []batchv1.Job) error {
	st := &b.Status
	st.ActiveJobs = nil
	for i := range jobs {
		job := &jobs[i]
		at, done, ok := finishedAt(job)
		if !done {
			st.ActiveJobs = append(st.ActiveJobs, job.Name)
			continue
		}
		_, recorded := job.Annotations[annRecorded]
		if recorded && !statusBehind(b, job, at, ok) {
			continue
		}
		res, err := r.result(ctx, job, ok)
		if err != nil {
			return err
		}
		if !recorded {
			claimed, err := r.claim(ctx, job, ok)
			if err != nil || !claimed {
				return err
			}
			r.count(ctx, b, job, res, ok)
		}
		if ok {
			applySuccess(b, job, res)
		} else {
			applyFailure(b, at, r.failureMessage(job, res))
		}
	}
	return nil
}

// statusBehind: the status does not show the outcome of job yet, which
// finished at time at. A success's backup ends after the Job's scheduled time; a
// failure is recorded at the time the Job failed (second precision).
func statusBehind(b *v1alpha1.DatabaseBackup, job *batchv1.Job, at time.Time, ok bool) bool {
	if ok {
		last := b.Status.LastBackupTime
		return last == nil || last.Time.Before(scheduledOf(job))
	}
	last := b.Status.LastFailureTime
	return last == nil || at.Truncate(time.Second).After(last.Time)
}

// claim marks job recorded; false when the Job is gone.
func (r *Reconciler) claim(ctx context.Context, job *batchv1.Job, ok bool) (bool, error) {
	base := job.DeepCopy()
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[annRecorded] = "failed"
	if ok {
		job.Annotations[annRecorded] = "succeeded"
	}
	err := r.Client.Patch(ctx, job, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to mark Job %s recorded: %w", job.Name, err)
	}
	return true, nil
}

// count records one run exactly once: the counters, the Event and the
// failure metric.
func (r *Reconciler) count(ctx context.Context, b *v1alpha1.DatabaseBackup, job *batchv1.Job, res backup.Result, ok bool) {
	if !ok {
		observeFailure(b)
		controller.Event(ctx, r.Recorder, b, job, corev1.EventTypeWarning, v1alpha1.ReasonBackupFailed, "Backup", "%s", r.failureMessage(job, res))
		return
	}
	b.Status.PrunedTotal += int64(res.Pruned)
	b.Status.SuccessesSinceVerification++
	controller.Event(ctx, r.Recorder, b, job, corev1.EventTypeNormal, v1alpha1.ReasonBackupSucceeded, "Backup",
		"Backup %s: %d bytes in %.1fs, sha256 %s, %d pruned", res.ID, res.Bytes, res.DurationSeconds, short(res.SHA256), res.Pruned)
}

func (r *Reconciler) failureMessage(job *batchv1.Job, res backup.Result) string {
	return fmt.Sprintf("Job %s failed: %s", job.Name, controller.Truncate(res.Error, 512))
}

// applySuccess puts a successful run into the status. Under
// concurrencyPolicy Allow runs may finish out of order: the newest backup
// wins the status. Applying the same run twice changes nothing.
func applySuccess(b *v1alpha1.DatabaseBackup, job *batchv1.Job, res backup.Result) {
	st := &b.Status
	end := res.End
	if end.IsZero() {
		end = scheduledOf(job)
	}
	if st.LastBackupTime != nil && st.LastBackupTime.Time.After(end) {
		return
	}
	st.LastBackupTime = &metav1.Time{Time: end}
	st.Recoverability = nil
	if w := res.Recoverability; w != nil {
		st.Recoverability = &v1alpha1.Recoverability{FirstPoint: metav1.Time{Time: w.First}, LastPoint: metav1.Time{Time: w.Last}}
	}
	st.Backups = nil
	for _, s := range res.Retained {
		st.Backups = append(st.Backups, v1alpha1.StoredBackup{ID: s.ID, Time: metav1.Time{Time: s.End}, SizeBytes: s.Bytes,
			SHA256: s.SHA256, PGVersion: s.PGVersion})
	}
	setCondition(b, v1alpha1.ConditionLastRunFailed, false, v1alpha1.ReasonBackupSucceeded,
		fmt.Sprintf("Backup %s stored (%d bytes)", res.ID, res.Bytes))
	observeSuccess(b, res)
}

// applyFailure puts a failed run into the status; idempotent like applySuccess.
func applyFailure(b *v1alpha1.DatabaseBackup, at time.Time, msg string) {
	if t := b.Status.LastFailureTime; t != nil && t.Time.After(at) {
		return
	}
	b.Status.LastFailureTime = &metav1.Time{Time: at}
	if last := b.Status.LastBackupTime; last == nil || !last.Time.After(at) {
		setCondition(b, v1alpha1.ConditionLastRunFailed, true, v1alpha1.ReasonBackupFailed, msg)
	}
}

// result reads what the Job's pod reported in its termination message. For
// a failed Job without one (a deadline, an image that does not pull), the
// Job's own condition says why.
func (r *Reconciler) result(ctx context.Context, job *batchv1.Job, succeeded bool) (backup.Result, error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return backup.Result{}, fmt.Errorf("failed to list the pods of Job %s: %w", job.Name, err)
	}
	// Only the Job's own pods: anyone who can create pods can make one
	// with its label, and its termination message would be taken for the
	// backup's result.
	own := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !metav1.IsControlledBy(&p, job) })
	slices.SortFunc(own, func(a, b corev1.Pod) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	for _, pod := range own {
		if succeeded != (pod.Status.Phase == corev1.PodSucceeded) {
			continue
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name != containerBackup || cs.State.Terminated == nil || cs.State.Terminated.Message == "" {
				continue
			}
			var res backup.Result
			if err := json.Unmarshal([]byte(cs.State.Terminated.Message), &res); err == nil {
				return res, nil
			}
			return backup.Result{Error: cs.State.Terminated.Message}, nil
		}
	}
	res := backup.Result{Error: "no result was reported"}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			res.Error = fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return res, nil
}

// pruneHistory deletes finished Jobs beyond the history limits, once
// their results are recorded.
func (r *Reconciler) pruneHistory(ctx context.Context, b *v1alpha1.DatabaseBackup, jobs []batchv1.Job) error {
	keepOK, keepFailed := limit(b.Spec.SuccessfulJobsHistoryLimit, 3), limit(b.Spec.FailedJobsHistoryLimit, 1)
	for i := len(jobs) - 1; i >= 0; i-- {
		job := &jobs[i]
		_, done, ok := finishedAt(job)
		if _, recorded := job.Annotations[annRecorded]; !done || !recorded || !job.DeletionTimestamp.IsZero() {
			continue
		}
		if ok {
			if keepOK--; keepOK >= 0 {
				continue
			}
		} else if keepFailed--; keepFailed >= 0 {
			continue
		}
		if err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete old Job %s: %w", job.Name, err)
		}
	}
	return nil
}

func limit(p *int32, def int) int {
	if p == nil {
		return def
	}
	return int(*p)
}

func short(s string) string { return s[:min(12, len(s))] }

// liftLastPoint moves a Physical series' lastPoint on to what the Database
// last archived to b, between runs: a run sees the archive only when it
// ends, the Database every segment.
func liftLastPoint(b *v1alpha1.DatabaseBackup, db *v1alpha1.Database) {
	w, r := db.Status.WALArchive, b.Status.Recoverability
	if b.Spec.Method != v1alpha1.BackupMethodPhysical || w == nil || w.Backup != b.Name || w.LastArchivedTime == nil || r == nil {
		return
	}
	if w.LastArchivedTime.After(r.LastPoint.Time) {
		r.LastPoint = *w.LastArchivedTime.DeepCopy()
	}
}
