package ha

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
)

// releaseWait bounds how long after a primary's pod was deleted failover
// waits, within a reconcile, for its lease's release. The instance manager
// releases it once postgres stops (a fast shutdown: well under a second
// here). Waiting for it in the reconcile that sees the pod being deleted
// (usually the one the deletion started), rather than for the release's
// own event and a reconcile of its own, takes the work queue and the
// reconcile's other steps out of the failover's way.
const releaseWait = 3 * time.Second

// releasePoll is how often that wait reads the cached lease.
const releasePoll = 10 * time.Millisecond

// settleWait bounds how long failover then asks the replicas again for
// positions read after the primary stopped. An instance that cannot read
// them now answers with its last observation, which is at most a second
// old (the instance's observation period): past settleWait it postdates
// the stop.
const settleWait = 1500 * time.Millisecond

// settlePoll is how often failover asks the replicas again while their
// positions have not settled.
const settlePoll = 100 * time.Millisecond

// announce writes at once, before the primary moves to target, that it
// does: status.targetPrimary names target and a condition says why. The
// status write at the end of the reconcile replaces it with what happened.
func (a *Actor) announce(ctx context.Context, db *v1alpha1.Database, v *View, target, typ, reason, msg string) error {
	if v.Written == nil {
		return nil
	}
	next := v.Written.DeepCopy()
	next.Status.TargetPrimary = target
	status := metav1.ConditionTrue
	if typ == v1alpha1.ConditionReady {
		status = metav1.ConditionFalse
	}
	conditions.Set(&next.Status.Conditions, db.Generation, typ, status, reason, msg)
	if err := controller.PatchStatus(ctx, a.Client, v.Written, next, v.Written.Status, next.Status); err != nil {
		return err
	}
	// The final write patches from what the server now has.
	*v.Written = *next
	db.ResourceVersion = next.ResourceVersion
	return nil
}

// promote asks the instance manager of pod to promote, with the Database's
// API token; only the operator can read it. waitLSN, in a switchover, is the
// WAL the replica must have received first.
func (a *Actor) promote(ctx context.Context, db *v1alpha1.Database, v *View, pod, waitLSN string) error {
	call, err := a.promoteCall(ctx, db, v, pod, waitLSN)
	if err != nil {
		return err
	}
	if err := call(); err != nil {
		return err
	}
	a.recordPromoted(ctx, db, pod, a.Clock.Now())
	return nil
}

// promoteCall readies promote's call of pod's instance manager: it reads
// the API token and pod's address first, so the call itself touches
// neither db nor obs, and failover runs it beside its status and label
// writes.
func (a *Actor) promoteCall(ctx context.Context, db *v1alpha1.Database, v *View, pod, waitLSN string) (func() error, error) {
	token, err := a.Host.APIToken(ctx, db)
	if err != nil {
		return nil, err
	}
	t, err := a.targetOf(ctx, db, v, pod)
	if err != nil {
		return nil, fmt.Errorf("cannot promote %s: %w", pod, err)
	}
	return func() error {
		if err := a.Instances.Promote(ctx, t, token, waitLSN); err != nil {
			return fmt.Errorf("failed to promote %s: %w", pod, err)
		}
		return nil
	}, nil
}

// recordPromoted notes pod's promotion (at time at) in the failover record under
// way, the metric and an Event.
func (a *Actor) recordPromoted(ctx context.Context, db *v1alpha1.Database, pod string, at time.Time) {
	now := metav1.NewTime(at)
	if f := db.Status.LastFailover; f != nil && f.To == pod && f.PromotedTime == nil {
		f.PromotedTime = &now
		if f.DetectedTime != nil {
			observeFailover(db, now.Sub(f.DetectedTime.Time))
		}
	}
	controller.Event(ctx, a.Recorder, db, nil, corev1.EventTypeNormal, v1alpha1.ReasonFailover, "Promote", "Promoted %s to primary", pod)
}
