package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

// step is one phase of a reconcile: it acts on the Database with what the
// observation holds, and records what it found in obs.found for the phases
// after and the status.
type step struct {
	name string
	run  func(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error)
}

// stepResult is how soon a step wants the Database again (0: no sooner
// than an event), and whether the reconcile ends after it.
type stepResult struct {
	requeue time.Duration
	stop    bool
}

// runSteps runs steps in order. An error ends the reconcile, named by its
// step (the work queue retries it with its backoff), and so does a phase that stops it,
// with its own delay; otherwise the reconcile comes back as soon as any
// phase asked, or when the instances are polled again (refresh).
func (r *Reconciler) runSteps(ctx context.Context, db *v1alpha1.Database, obs *observation, steps []step) (reconcile.Result, error) {
	var delays []time.Duration
	for _, p := range steps {
		res, err := p.run(ctx, db, obs)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("%s: %w", p.name, err)
		}
		if res.stop {
			return reconcile.Result{RequeueAfter: res.requeue}, nil
		}
		delays = append(delays, res.requeue)
	}
	return reconcile.Result{RequeueAfter: controller.Soonest(append(delays, refresh(obs))...)}, nil
}

// steps are a valid Database's reconcile, in order (doc.go says where
// each lives).
func (r *Reconciler) steps() []step {
	return []step{
		{"secrets", stopOnConflict(r.ensureSecrets)},
		{"children of other owners", stopOnConflict(r.checkChildren)},
		{"TLS", r.tlsPhase},
		{"primary lease", just(r.ensurePrimaryLease)},
		{"WAL archive", just(r.resolveArchive)},
		{"replica source", just(r.resolveReplica)},
		{"replica promotion without a claim", just(r.waiveClaim)},
		{"configuration and Services", just(func(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
			return r.applyConfigAndServices(ctx, db, obs.plan)
		})},
		{"observe", just(r.observe)},
		{"image", just(r.chooseImage)},
		{"fencing on request", just(r.fencePhase)},
		{"demotion", r.demotePhase},
		{"WAL archive status", just(func(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
			r.archiveEvent(ctx, db, obs.Written, obs)
			recordArchiveMetrics(db, obs)
			return nil
		})},
		{"restore source", r.restorePhase},
		{"hibernation", r.hibernationPhase},
		{"StatefulSet", just(r.applyStatefulSet)},
		{"disruption budgets", just(func(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
			return r.applyDisruptionBudget(ctx, db, obs.plan)
		})},
		{"hibernated", hibernatedPhase},
		{"major upgrade", r.majorUpgradePhase},
		{"failover", unlessFollowing(r.haPhase((*ha.Actor).Failover))},
		{"switchover", unlessFollowing(r.haPhase((*ha.Actor).Switchover))},
		{"switchover for a drain", unlessFollowing(r.haPhase((*ha.Actor).SwitchoverForDrain))},
		{"switchover for a scale-down", unlessFollowing(r.haPhase((*ha.Actor).SwitchoverForScaleDown))},
		{"role labels", just(r.roleLabels)},
		{"roles", unlessFollowing(r.rolesPhase)},
		{"databases", unlessFollowing(r.databasesPhase)},
		{"pooler", unlessFollowing(r.poolerPhase)},
		{"configuration nudge", just(func(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
			return r.nudgePods(ctx, obs.Pods, configHash(db, obs.plan)+"/"+obs.found.tls.version)
		})},
		{"storage", just(r.reconcileStorage)},
		{"rollout and spec.backup", r.rolloutPhase},
	}
}

// availabilitySteps are what a Database whose spec is invalid still
// gets: nothing the spec would change (the StatefulSet, its settings, a
// rollout) until it is valid again, which the Ready condition asks for,
// but all that keeps the instances it runs available: certificate
// renewal, the primary lease, failover and the role labels -rw routes by.
func (r *Reconciler) availabilitySteps() []step {
	return []step{
		{"children of other owners", stopOnConflict(r.checkChildren)},
		{"TLS", func(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
			renewIn, err := r.reconcileTLS(ctx, db, obs)
			return stepResult{requeue: renewIn}, err
		}},
		{"primary lease", just(r.ensurePrimaryLease)},
		{"observe", just(r.observe)},
		{"image", just(r.chooseImage)},
		{"failover", unlessFollowing(r.haPhase((*ha.Actor).Failover))},
		{"role labels", just(r.roleLabels)},
	}
}

// unlessFollowing skips a phase that acts on a primary while the
// Database follows its source (spec.replica), or was superseded (another
// Database was promoted from its archive, or from its source): it has
// none, and none may be promoted; or its promotion waits to replay up to
// its promotion token.
func unlessFollowing(run func(context.Context, *v1alpha1.Database, *observation) (stepResult, error)) func(context.Context, *v1alpha1.Database, *observation) (stepResult, error) {
	return func(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
		if following(db) || supersededBy(obs) != "" || promotionHeld(db, obs) != "" {
			return stepResult{}, nil
		}
		return run(ctx, db, obs)
	}
}

// chooseImage decides which images the instances run (decideImage).
func (r *Reconciler) chooseImage(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	obs.found.in = r.decideImage(ctx, db, obs)
	return nil
}

// stopIf ends the reconcile when stop holds, to come back after retry.
func stopIf(stop bool, retry time.Duration) stepResult {
	if !stop {
		return stepResult{}
	}
	return stepResult{requeue: retry, stop: true}
}

// just is a phase that only acts (or fails).
func just(f func(context.Context, *v1alpha1.Database, *observation) error) func(context.Context, *v1alpha1.Database, *observation) (stepResult, error) {
	return func(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
		return stepResult{}, f(ctx, db, obs)
	}
}

// stopOnConflict is a phase that ends the reconcile when it found a child
// another owner holds (obs.found.conflict), to look again after conflictRetry.
func stopOnConflict(f func(context.Context, *v1alpha1.Database, *observation) error) func(context.Context, *v1alpha1.Database, *observation) (stepResult, error) {
	return func(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
		if err := f(ctx, db, obs); err != nil {
			return stepResult{}, err
		}
		return stopIf(obs.found.conflict != "", conflictRetry), nil
	}
}

// tlsPhase renews the certificates when due; a conflict, or a certificate
// problem before the instances exist, ends the reconcile.
func (r *Reconciler) tlsPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	renewIn, err := r.reconcileTLS(ctx, db, obs)
	if err != nil {
		return stepResult{}, err
	}
	if obs.found.conflict != "" || (obs.found.tls.problem != "" && obs.sts == nil) {
		return stepResult{requeue: conflictRetry, stop: true}, nil
	}
	return stepResult{requeue: renewIn}, nil
}

// restorePhase finds a restore's source; until it can, nothing is made.
func (r *Reconciler) restorePhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	if err := r.resolveRestore(ctx, db, obs); err != nil {
		return stepResult{}, err
	}
	return stopIf(obs.found.restoreFailed != "", restoreRetry), nil
}

// majorUpgradePhase: while every instance stops for the upgrade Job,
// nothing fails over, switches over or rolls out.
func (r *Reconciler) majorUpgradePhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	stopped, err := r.reconcileMajorUpgrade(ctx, db, obs)
	return stopIf(stopped, upgradePoll), err
}

// haPhase runs one of the HA actor's steps on the observation's view.
func (r *Reconciler) haPhase(step func(*ha.Actor, context.Context, *v1alpha1.Database, *ha.View) (reconcile.Result, error)) func(context.Context, *v1alpha1.Database, *observation) (stepResult, error) {
	return func(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
		res, err := step(r.actor(), ctx, db, &obs.View)
		return stepResult{requeue: res.RequeueAfter}, err
	}
}

// roleLabels labels the pods by role, for the -rw and -ro Services.
func (r *Reconciler) roleLabels(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	return r.labelRoles(ctx, obs.Pods, obs.Primary, func(p *corev1.Pod) bool { return fencedPod(db, obs, p) })
}

// rolloutPhase rolls the instances; spec.backup's DatabaseBackup comes
// after it, whatever the rollout did: a DatabaseBackup that cannot be
// written must not hold up the instances.
func (r *Reconciler) rolloutPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	res, err := r.rollOut(ctx, db, obs)
	return stepResult{requeue: res.RequeueAfter}, errors.Join(err, r.applyManagedBackup(ctx, db, obs))
}
