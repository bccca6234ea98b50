package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// A major upgrade (spec.version goes up):
//
//  1. Stopping: the StatefulSet goes to 0 replicas, on the old image. From
//     here writes are unavailable; failover, switchover and rollouts hold.
//  2. Upgrading: a Job on the primary's volume bundles the old image's
//     programs (init container) and upgrades the data with them and the
//     new image's (internal/instance/upgrade.go): check, copy, swap, and a
//     first start of the new server with the managed configuration. Any
//     failure leaves the data as it was.
//  3. Starting: the StatefulSet comes back on the new image (or, after a
//     failure, the old one); replicas find data of another major and clone
//     the primary again.
//  4. Succeeded or Failed once the primary accepts connections; a failed
//     version is not tried again until spec.version changes.
//
// The StatefulSet's annotations carry the state across reconciles; the
// Database's status.upgrade reports it.

const (
	// annUpgrading is "<from>-<to>" on the StatefulSet while the instances
	// are stopped for the upgrade Job.
	annUpgrading = "daytwo.dev/upgrading"
	// annUpgradeFailed is the major whose upgrade failed, and the
	// Database's AnnotationRetryUpgrade then: "<major>/<retry>".
	annUpgradeFailed = "daytwo.dev/upgrade-failed"

	containerBundle = "old-programs"
	volumeUpgrade   = "upgrade"
	upgradeMount    = "/upgrade"
	// upgradeJobDeadline bounds the upgrade Job; pg_upgrade in copy mode
	// moves about 100 MB/s here, so an hour covers several hundred GB.
	upgradeJobDeadline = time.Hour
	// upgradePoll is how often a reconcile looks again while the instances
	// are stopped (the Job's and the pods' events come sooner).
	upgradePoll = 5 * time.Second
)

// upgradeAction is what a reconcile does about a major version change.
type upgradeAction int

const (
	// upgradeHold: keep the old version (this version failed before, or
	// the upgrade cannot start yet).
	upgradeHold upgradeAction = iota
	// upgradeStop: stop the instances (first step, or still stopping).
	upgradeStop
	// upgradeBackup: take the pre-upgrade backup, or wait for it; the
	// instances keep serving.
	upgradeBackup
	// upgradeRunJob: every instance stopped; create or wait for the Job.
	upgradeRunJob
	// upgradeFinish: the Job succeeded; start on the new version.
	upgradeFinish
	// upgradeAbort: the Job failed; start on the old version.
	upgradeAbort
)

// upgradeFacts are what decideUpgrade weighs.
type upgradeFacts struct {
	from, to  string // the data's major and spec.version
	upgrading bool   // annUpgrading is set: the instances were told to stop
	failedTo  string // the major annUpgradeFailed names
	retry     bool   // AnnotationRetryUpgrade changed since that failure
	primary   string // the lease's holder
	primary0  string // the instance that starts first (ordinal 0)
	// primaryServing: primary0 is ready and its instance manager says it
	// is the primary (not a switchover's target still promoting).
	primaryServing bool
	job            jobState
	// archivedBy names a Physical DatabaseBackup archiving this Database's
	// WAL: pg_upgrade makes a new cluster (a new system identifier), whose
	// WAL that archive refuses, and whose base backups it cannot mix.
	archivedBy string
	backup     backupState // the pre-upgrade backup of this attempt
	backupWhy  string      // why it failed
}

type backupState int

const (
	backupNotNeeded backupState = iota // no backup storage configured
	backupWanted                       // not asked for this attempt yet
	backupRunning
	backupDone
	backupFailed
)

type jobState int

const (
	jobNone jobState = iota
	jobRunning
	jobSucceeded
	jobFailed
)

// decideUpgrade is the major upgrade's state machine; why explains a hold.
func decideUpgrade(f upgradeFacts) (action upgradeAction, why string) {
	switch {
	case f.upgrading && f.job == jobSucceeded:
		return upgradeFinish, ""
	case f.upgrading && f.job == jobFailed:
		return upgradeAbort, ""
	case f.upgrading:
		return upgradeRunJob, ""
	case f.job == jobRunning:
		// A Job left by an earlier attempt: never run a second beside it.
		return upgradeHold, "an upgrade Job from an earlier attempt still runs"
	case f.failedTo == f.to && !f.retry:
		return upgradeHold, ""
	case f.archivedBy != "":
		return upgradeHold, fmt.Sprintf("Physical DatabaseBackup %s archives this Database's WAL, and the upgraded cluster "+
			"(a new system identifier) cannot continue that archive: delete it, or give its storage a new prefix, "+
			"and take a base backup after the upgrade", f.archivedBy)
	case f.primary == "":
		return upgradeHold, "no primary is known yet"
	case f.primary == f.primary0 && !f.primaryServing:
		return upgradeHold, f.primary0 + " does not serve as the primary yet"
	case f.primary != f.primary0:
		// The StatefulSet starts its instances in order, each once the one
		// before is ready: a replica first would wait for a primary that
		// is not started.
		return upgradeHold, fmt.Sprintf("the primary is %s, and a major upgrade needs it on %s: "+
			"switch over to %s first (annotation %s)", f.primary, f.primary0, f.primary0, v1alpha1.AnnotationSwitchoverTo)
	case f.backup == backupWanted || f.backup == backupRunning:
		return upgradeBackup, ""
	case f.backup == backupFailed:
		return upgradeHold, "the pre-upgrade backup failed (" + f.backupWhy + "); fix it, then change annotation " +
			v1alpha1.AnnotationRetryUpgrade + " to try again"
	default:
		return upgradeStop, ""
	}
}

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

// planMajorUpgrade is decideImage's part for a version change: it sets the
// StatefulSet's inputs and says what the reconcile must do.
func (r *Reconciler) planMajorUpgrade(db *v1alpha1.Database, obs *observation, in *stsInputs) {
	live := obs.sts
	failed, retryToken, _ := strings.Cut(live.Annotations[annUpgradeFailed], "/")
	attempt := live.Annotations[annUpgrading]
	f := upgradeFacts{from: in.major, to: db.Spec.Version, upgrading: attempt != "",
		failedTo: failed, retry: retryToken != db.Annotations[v1alpha1.AnnotationRetryUpgrade],
		primary: obs.primary, primary0: podName(db, 0), primaryServing: primaryServing(obs, podName(db, 0)),
		job: jobStateOf(obs.upgradeJob)}
	if f.upgrading && obs.upgradeJob != nil && obs.upgradeJob.Annotations[annUpgrading] != attempt {
		// A Job of another attempt (its deletion failed once): never take
		// its outcome for this one's. It goes, then this attempt's is made.
		obs.staleJob, f.job = true, jobNone
	}
	if !f.upgrading || f.job == jobNone {
		// Until the Job exists, the attempt follows spec.version; from
		// then on it is the Job's.
		attempt = f.from + "-" + f.to
	}
	obs.upgradeTo = attempt[strings.IndexByte(attempt, '-')+1:]
	f.backup, f.backupWhy = preUpgradeBackupState(db, obs.preBackup)
	if a := obs.plan.archive; a != nil {
		f.archivedBy = a.backup
	}
	action, why := decideUpgrade(f)
	obs.upgradeAction = action
	in.failedUpgrade = live.Annotations[annUpgradeFailed]
	old := obs.templateImage
	switch action {
	case upgradeHold:
		in.image = old
		if f.failedTo == f.to {
			obs.upgradeFailed = fmt.Sprintf("The upgrade from PostgreSQL %s to %s failed; the instances run %s on the data as it was. "+
				"It is tried again when spec.version changes or annotation %s does", f.from, f.to, old, v1alpha1.AnnotationRetryUpgrade)
			if u := db.Status.Upgrade; u != nil && u.Message != "" {
				obs.upgradeFailed += ": " + u.Message
			}
		} else {
			obs.rolloutWaiting = fmt.Sprintf("Major upgrade from PostgreSQL %s to %s waits: %s", f.from, f.to, why)
		}
	case upgradeBackup:
		in.image = old
		obs.rolloutWaiting = fmt.Sprintf("Major upgrade from PostgreSQL %s to %s: taking the pre-upgrade backup with DatabaseBackup %s",
			f.from, f.to, preUpgradeBackupName(db))
	case upgradeStop, upgradeRunJob:
		in.image, in.stopped, in.upgrading, in.failedUpgrade = old, true, attempt, ""
		obs.rolloutWaiting = fmt.Sprintf("Major upgrade from PostgreSQL %s to %s: every instance stops, then a Job upgrades the primary's data", f.from, f.to)
	case upgradeFinish:
		// The data is the new major now: never roll back to an image of
		// the old one.
		in.major, in.goodImage, in.failedImage, in.failedUpgrade = obs.upgradeTo, "", "", ""
		if obs.upgradeTo != db.Spec.Version {
			// spec.version went further during the upgrade: the data is
			// the Job's target, and the next upgrade starts from it.
			in.image = postgres.DefaultImage(obs.upgradeTo)
		}
	case upgradeAbort:
		in.image, in.failedUpgrade = old, obs.upgradeTo+"/"+db.Annotations[v1alpha1.AnnotationRetryUpgrade]
	}
}

// reconcileMajorUpgrade acts on planMajorUpgrade's decision after the
// StatefulSet was applied, and keeps status.upgrade. It returns true while
// the instances are stopped for the upgrade: nothing else may act on them.
func (r *Reconciler) reconcileMajorUpgrade(ctx context.Context, db *v1alpha1.Database, obs *observation) (bool, error) {
	switch obs.upgradeAction {
	case upgradeBackup:
		return false, r.takePreUpgradeBackup(ctx, db, obs, obs.in.major, db.Spec.Version)
	case upgradeStop:
		r.upgradeStopping(ctx, db, obs)
		return true, nil
	case upgradeRunJob:
		return true, r.runUpgradeJob(ctx, db, obs)
	case upgradeFinish, upgradeAbort:
		// The StatefulSet no longer says upgrading (applied before this):
		// the Job's outcome is recorded, so it goes.
		r.upgradeJobEnded(ctx, db, obs)
		return false, r.deleteUpgradeJob(ctx, db)
	}
	// A finished Job no attempt runs any more (its deletion failed once) goes.
	if j := obs.upgradeJob; j != nil && (obs.sts == nil || obs.sts.Annotations[annUpgrading] == "") &&
		jobStateOf(j) != jobRunning && j.DeletionTimestamp.IsZero() {
		if err := r.deleteUpgradeJob(ctx, db); err != nil {
			return false, err
		}
	}
	r.upgradeServed(ctx, db, obs)
	return false, nil
}

// upgradeStopping starts status.upgrade for this attempt (keeping the
// pre-upgrade backup's ID) when the instances are told to stop.
func (r *Reconciler) upgradeStopping(ctx context.Context, db *v1alpha1.Database, obs *observation) {
	u, from, to := db.Status.Upgrade, obs.in.major, db.Spec.Version
	if u != nil && u.To == to && u.Phase == v1alpha1.MajorUpgradeStopping {
		return
	}
	id := ""
	if u != nil && u.To == to && u.Phase == v1alpha1.MajorUpgradeBackingUp {
		id = u.BackupID
	}
	db.Status.Upgrade = &v1alpha1.MajorUpgradeStatus{From: from, To: to, Phase: v1alpha1.MajorUpgradeStopping,
		StartTime: ptr.To(metav1.NewTime(obs.now)), Message: "stopping every instance", BackupID: id}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "MajorUpgrade", "Upgrade",
		"Upgrading PostgreSQL %s to %s: stopping every instance", from, to)
}

// runUpgradeJob waits for every instance to stop, then makes this
// attempt's Job (after removing another attempt's).
func (r *Reconciler) runUpgradeJob(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	u := db.Status.Upgrade
	if len(obs.pods) > 0 {
		if u != nil && u.Phase == v1alpha1.MajorUpgradeStopping {
			u.Message = "stopping every instance; still running: " + strings.Join(podNames(obs.pods), ", ")
		}
		return nil
	}
	if obs.staleJob {
		return r.deleteUpgradeJob(ctx, db)
	}
	if obs.upgradeJob == nil {
		if err := controller.Apply(ctx, r.Client, upgradeJob(db, obs.plan, obs.in, obs.templateImage, obs.plan.image), "Job"); err != nil {
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
	u.Phase, u.To = v1alpha1.MajorUpgradeStarting, obs.upgradeTo
	if obs.upgradeAction == upgradeFinish {
		u.Message = "the primary's data is upgraded; the instances start on PostgreSQL " + u.To
		return
	}
	u.Message = r.upgradeJobError(ctx, db, obs.upgradeJob)
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, v1alpha1.ReasonMajorUpgradeFailed, "Upgrade",
		"Upgrading PostgreSQL %s to %s failed, starting %s again on the data as it was: %s", u.From, u.To, u.From, u.Message)
}

// upgradeServed ends status.upgrade once the primary serves again: on the
// new version (Succeeded) or the old one (Failed), with how long writes
// were unavailable.
func (r *Reconciler) upgradeServed(ctx context.Context, db *v1alpha1.Database, obs *observation) {
	u := db.Status.Upgrade
	if u == nil || u.Phase != v1alpha1.MajorUpgradeStarting || !primaryServes(obs) {
		return
	}
	now := metav1.NewTime(obs.now)
	u.CompletionTime = &now
	if u.StartTime != nil {
		u.WritesUnavailableSeconds = int64(now.Sub(u.StartTime.Time).Round(time.Second).Seconds())
	}
	if obs.in.major != u.To {
		u.Phase = v1alpha1.MajorUpgradeFailed
		return
	}
	u.Phase, u.Message = v1alpha1.MajorUpgradeSucceeded, fmt.Sprintf("PostgreSQL %s to %s; writes were unavailable for %ds", u.From, u.To, u.WritesUnavailableSeconds)
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "MajorUpgrade", "Upgrade", "Upgraded PostgreSQL %s to %s", u.From, u.To)
}

// deleteUpgradeJob removes the upgrade Job and, in the background, its pod.
func (r *Reconciler) deleteUpgradeJob(ctx context.Context, db *v1alpha1.Database) error {
	err := r.Client.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: upgradeJobName(db)}},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}

// primaryServing is false while the lease is being handed over (a
// switchover's target not promoted yet), or pod runs and is not ready, or
// its instance manager answers it is no primary: its volume must hold the
// primary's data, cleanly shut down, when the instances stop.
func primaryServing(obs *observation, pod string) bool {
	if obs.lease != nil && obs.lease.Annotations[instanceapi.AnnotationHandoverLSN] != "" {
		return false
	}
	for i := range obs.pods {
		if obs.pods[i].Name == pod {
			s, ok := obs.instances[pod]
			return podReady(&obs.pods[i]) && (!ok || s.Role == instanceapi.RolePrimary)
		}
	}
	return true // nothing runs (every instance down): its volume is all there is
}

// primaryServes: the lease's holder is ready.
func primaryServes(obs *observation) bool {
	for i := range obs.pods {
		if obs.pods[i].Name == obs.primary {
			return podReady(&obs.pods[i])
		}
	}
	return false
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

// readUpgradeObjects fills obs.upgradeJob and obs.preBackup.
func (r *Reconciler) readUpgradeObjects(ctx context.Context, db *v1alpha1.Database, o *observation) error {
	j := &batchv1.Job{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: upgradeJobName(db)}, j); {
	case err == nil:
		o.upgradeJob = j
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("failed to get the upgrade Job: %w", err)
	}
	b := &v1alpha1.DatabaseBackup{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: preUpgradeBackupName(db)}, b); {
	case err == nil:
		o.preBackup = b
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("failed to get the pre-upgrade DatabaseBackup: %w", err)
	}
	return nil
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

// The pre-upgrade backup: when the Database has backup storage (spec.backup
// or spec.backupStorage), a one-shot DatabaseBackup <name>-pre-upgrade
// stores a logical backup before the instances stop. Its annotation ties
// the run to the attempt (the version and the retry annotation), so a
// retry takes a fresh one. Restore it with bootstrap.fromBackup.

const (
	labelPreUpgradeOf = "daytwo.dev/pre-upgrade-of"
	annPreUpgradeFor  = "daytwo.dev/pre-upgrade-for"
)

func preUpgradeBackupName(db *v1alpha1.Database) string { return db.Name + "-pre-upgrade" }

// preUpgradeAttempt identifies this attempt's backup request.
func preUpgradeAttempt(db *v1alpha1.Database) string {
	return db.Spec.Version + "/" + db.Annotations[v1alpha1.AnnotationRetryUpgrade]
}

// preUpgradeBackupState reads the pre-upgrade DatabaseBackup b (nil when
// none) for this attempt.
func preUpgradeBackupState(db *v1alpha1.Database, b *v1alpha1.DatabaseBackup) (backupState, string) {
	if db.Spec.BackupStorage == nil && db.Spec.Backup == nil {
		return backupNotNeeded, ""
	}
	if b == nil || b.Annotations[annPreUpgradeFor] != preUpgradeAttempt(db) {
		return backupWanted, ""
	}
	at, err := time.Parse(time.RFC3339, b.Annotations[v1alpha1.AnnotationBackupRequested])
	if err != nil {
		return backupWanted, ""
	}
	if len(b.Status.Backups) > 0 && b.Status.Backups[0].ID == backup.NewID(at) {
		return backupDone, ""
	}
	last := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
	if last != nil && last.Status == metav1.ConditionTrue && b.Status.LastFailureTime != nil && !b.Status.LastFailureTime.Time.Before(at) {
		return backupFailed, last.Message
	}
	return backupRunning, ""
}

// takePreUpgradeBackup creates the pre-upgrade DatabaseBackup, or asks the
// existing one for a run of this attempt, and reports it in status.upgrade.
func (r *Reconciler) takePreUpgradeBackup(ctx context.Context, db *v1alpha1.Database, obs *observation, from, to string) error {
	name := preUpgradeBackupName(db)
	b := obs.preBackup
	request := obs.now.UTC().Format(time.RFC3339)
	switch {
	case b == nil:
		b = oneShotBackup(db, name, map[string]string{labelPreUpgradeOf: db.Name},
			map[string]string{annPreUpgradeFor: preUpgradeAttempt(db), v1alpha1.AnnotationBackupRequested: request})
		if err := controllerutil.SetControllerReference(db, b, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, b); err != nil {
			return fmt.Errorf("failed to create the pre-upgrade DatabaseBackup: %w", err)
		}
	case b.Labels[labelPreUpgradeOf] != db.Name:
		obs.rolloutWaiting = fmt.Sprintf("Major upgrade waits: DatabaseBackup %s exists and is not this Database's pre-upgrade backup; rename it", name)
		return nil
	case b.Annotations[annPreUpgradeFor] != preUpgradeAttempt(db):
		if err := r.requestRun(ctx, b, map[string]string{annPreUpgradeFor: preUpgradeAttempt(db),
			v1alpha1.AnnotationBackupRequested: request}); err != nil {
			return fmt.Errorf("failed to ask DatabaseBackup %s for the pre-upgrade backup: %w", name, err)
		}
	default:
		return nil // asked for; it runs
	}
	at, _ := time.Parse(time.RFC3339, request)
	db.Status.Upgrade = &v1alpha1.MajorUpgradeStatus{From: from, To: to, Phase: v1alpha1.MajorUpgradeBackingUp,
		BackupID: backup.NewID(at), Message: "taking the pre-upgrade backup with DatabaseBackup " + name}
	controller.Event(ctx, r.Recorder, db, b, corev1.EventTypeNormal, "MajorUpgrade", "Upgrade",
		"Upgrading PostgreSQL %s to %s: taking the pre-upgrade backup with DatabaseBackup %s", from, to, name)
	return nil
}
