package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/api/v1alpha1"
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

// planMajorUpgrade is decideImage's part for a version change: it sets the
// StatefulSet's inputs and says what the reconcile must do.
func (r *Reconciler) planMajorUpgrade(db *v1alpha1.Database, obs *observation, in *stsInputs) {
	live := obs.sts
	failed, retryToken, _ := strings.Cut(live.Annotations[annUpgradeFailed], "/")
	attempt := live.Annotations[annUpgrading]
	f := upgradeFacts{from: in.major, to: db.Spec.Version, upgrading: attempt != "",
		failedTo: failed, retry: retryToken != db.Annotations[v1alpha1.AnnotationRetryUpgrade],
		primary: obs.Primary, primary0: podName(db, 0), primaryServing: primaryServing(obs, podName(db, 0)),
		job: jobStateOf(obs.upgradeJob)}
	if f.upgrading && obs.upgradeJob != nil && obs.upgradeJob.Annotations[annUpgrading] != attempt {
		// A Job of another attempt (its deletion failed once): never take
		// its outcome for this one's. It goes, then this attempt's is made.
		obs.found.staleJob, f.job = true, jobNone
	}
	if !f.upgrading || f.job == jobNone {
		// Until the Job exists, the attempt follows spec.version; from
		// then on it is the Job's.
		attempt = f.from + "-" + f.to
	}
	obs.found.upgradeTo = attempt[strings.IndexByte(attempt, '-')+1:]
	f.backup, f.backupWhy = preUpgradeBackupState(db, obs.preBackup)
	if a := obs.plan.archive; a != nil {
		f.archivedBy = a.backup
	}
	action, why := decideUpgrade(f)
	obs.found.upgradeAction = action
	in.failedUpgrade = live.Annotations[annUpgradeFailed]
	old := obs.found.templateImage
	switch action {
	case upgradeHold:
		in.image = old
		if f.failedTo == f.to {
			obs.found.upgradeFailed = fmt.Sprintf("The upgrade from PostgreSQL %s to %s failed; the instances run %s on the data as it was. "+
				"It is tried again when spec.version changes or annotation %s does", f.from, f.to, old, v1alpha1.AnnotationRetryUpgrade)
			if u := db.Status.Upgrade; u != nil && u.Message != "" {
				obs.found.upgradeFailed += ": " + u.Message
			}
		} else {
			obs.found.rolloutWaiting = fmt.Sprintf("Major upgrade from PostgreSQL %s to %s waits: %s", f.from, f.to, why)
		}
	case upgradeBackup:
		in.image = old
		obs.found.rolloutWaiting = fmt.Sprintf("Major upgrade from PostgreSQL %s to %s: taking the pre-upgrade backup with DatabaseBackup %s",
			f.from, f.to, preUpgradeBackupName(db))
	case upgradeStop, upgradeRunJob:
		in.image, in.stopped, in.upgrading, in.failedUpgrade = old, true, attempt, ""
		obs.found.rolloutWaiting = fmt.Sprintf("Major upgrade from PostgreSQL %s to %s: every instance stops, then a Job upgrades the primary's data", f.from, f.to)
	case upgradeFinish:
		// The data is the new major now: never roll back to an image of
		// the old one.
		in.major, in.goodImage, in.failedImage, in.failedUpgrade = obs.found.upgradeTo, "", "", ""
		if obs.found.upgradeTo != db.Spec.Version {
			// spec.version went further during the upgrade: the data is
			// the Job's target, and the next upgrade starts from it.
			in.image = postgres.DefaultImage(obs.found.upgradeTo)
		}
	case upgradeAbort:
		in.image, in.failedUpgrade = old, obs.found.upgradeTo+"/"+db.Annotations[v1alpha1.AnnotationRetryUpgrade]
	}
}

// reconcileMajorUpgrade acts on planMajorUpgrade's decision after the
// StatefulSet was applied, and keeps status.upgrade. It returns true while
// the instances are stopped for the upgrade: nothing else may act on them.
func (r *Reconciler) reconcileMajorUpgrade(ctx context.Context, db *v1alpha1.Database, obs *observation) (bool, error) {
	switch obs.found.upgradeAction {
	case upgradeBackup:
		return false, r.takePreUpgradeBackup(ctx, db, obs, obs.found.in.major, db.Spec.Version)
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
	u, from, to := db.Status.Upgrade, obs.found.in.major, db.Spec.Version
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
	if obs.found.in.major != u.To {
		u.Phase = v1alpha1.MajorUpgradeFailed
		return
	}
	u.Phase, u.Message = v1alpha1.MajorUpgradeSucceeded, fmt.Sprintf("PostgreSQL %s to %s; writes were unavailable for %ds", u.From, u.To, u.WritesUnavailableSeconds)
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "MajorUpgrade", "Upgrade", "Upgraded PostgreSQL %s to %s", u.From, u.To)
}

// primaryServing is false while the lease is being handed over (a
// switchover's target not promoted yet), or pod runs and is not ready, or
// its instance manager answers it is no primary: its volume must hold the
// primary's data, cleanly shut down, when the instances stop.
func primaryServing(obs *observation, pod string) bool {
	if obs.Lease != nil && obs.Lease.Annotations[instanceapi.AnnotationHandoverLSN] != "" {
		return false
	}
	for i := range obs.Pods {
		if obs.Pods[i].Name == pod {
			s, ok := obs.Instances[pod]
			return podReady(&obs.Pods[i]) && (!ok || s.Role == instanceapi.RolePrimary)
		}
	}
	return true // nothing runs (every instance down): its volume is all there is
}

// primaryServes: the lease's holder is ready.
func primaryServes(obs *observation) bool {
	for i := range obs.Pods {
		if obs.Pods[i].Name == obs.Primary {
			return podReady(&obs.Pods[i])
		}
	}
	return false
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
