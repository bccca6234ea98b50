package database

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

// hibernatePoll is how often a hibernating Database is looked at while its
// primary moves or its instances stop (their events come sooner).
const hibernatePoll = 5 * time.Second

// hibernationPhase carries out spec.hibernation On. The instances wake in
// order from <name>-0, and a replica is ready only once it streams, so the
// primary first moves to <name>-0 (a switchover, as before a scale-down
// that would remove it); then every instance stops, the volumes kept.
// A major upgrade under way finishes first.
func (r *Reconciler) hibernationPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	if db.Spec.Hibernation != v1alpha1.HibernationOn {
		return stepResult{}, nil
	}
	switch obs.found.upgradeAction {
	case upgradeStop, upgradeRunJob, upgradeFinish, upgradeAbort:
		if obs.found.in.major != db.Spec.Version || obs.found.in.upgrading != "" {
			// The instances stop, upgrade or start for a major upgrade
			// under way: hibernation comes after it.
			return stepResult{}, nil
		}
	}
	if obs.found.keepStatefulSet {
		// The StatefulSet is left as it is (a restore's source went away):
		// it would not stop, and nothing else may then stop acting on it.
		obs.found.rolloutWaiting = "Hibernation waits: the StatefulSet is kept as it is, since the DatabaseBackup it was restored from is gone"
		return stepResult{}, nil
	}
	first := podName(db, 0)
	if obs.Primary != "" && obs.Primary != first && ha.Ordinal(obs.Primary) > 0 {
		obs.found.hibernating = fmt.Sprintf("Hibernating: the primary moves from %s to %s, which starts first on waking", obs.Primary, first)
		if obs.PodNamed(first) == nil {
			// Stopped now, the instances could not wake: the first would
			// wait for a primary that starts only after it.
			obs.found.hibernating += "; " + first + " does not run"
			return stepResult{requeue: hibernatePoll}, nil
		}
		if switchoverRequested(db) {
			// A switchover the user asked for comes first (its step runs
			// later in this reconcile).
			return stepResult{requeue: hibernatePoll}, nil
		}
		// The switchover a scale-down to one instance would make; the
		// rest of the reconcile goes on (a primary that dies meanwhile is
		// failed over as ever).
		want, held := obs.WantInstances, obs.ShrinkHeld
		obs.WantInstances, obs.ShrinkHeld = 1, true
		res, err := r.actor().SwitchoverForScaleDown(ctx, db, &obs.View)
		obs.WantInstances, obs.ShrinkHeld = want, held
		if obs.SwitchoverWaiting != "" {
			obs.found.hibernating += "; " + obs.SwitchoverWaiting
		}
		return stepResult{requeue: max(res.RequeueAfter, hibernatePoll)}, err
	}
	obs.found.in.stopped = true
	obs.found.hibernating = fmt.Sprintf("Hibernated: no instance runs, and the %d volumes are kept; spec.hibernation Off starts them again", obs.plan.instances)
	if len(obs.Pods) > 0 {
		obs.found.hibernating = fmt.Sprintf("Hibernating: stopping %d instances, the primary last; their volumes are kept", len(obs.Pods))
	}
	return stepResult{}, nil
}

// hibernatedPhase ends the reconcile of a hibernating Database once its
// StatefulSet says so: nothing fails over, rolls or scales an instance
// that is meant to stop.
func hibernatedPhase(_ context.Context, _ *v1alpha1.Database, obs *observation) (stepResult, error) {
	if obs.found.hibernating == "" || !obs.found.in.stopped {
		return stepResult{}, nil
	}
	if len(obs.Pods) > 0 {
		return stepResult{requeue: hibernatePoll, stop: true}, nil
	}
	return stepResult{stop: true}, nil
}

// switchoverRequested says whether a switchover was asked for and not
// answered yet.
func switchoverRequested(db *v1alpha1.Database) bool {
	at, err := time.Parse(time.RFC3339, db.Annotations[v1alpha1.AnnotationSwitchoverRequested])
	if err != nil {
		return false
	}
	last := db.Status.LastSwitchover
	return last == nil || last.RequestedTime.Time.Before(at)
}

// hibernated says whether no instance of db runs for its hibernation, as
// its status last said.
func hibernated(db *v1alpha1.Database) bool {
	c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Reason == v1alpha1.ReasonHibernated
}
