package database

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

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
func (r *Reconciler) announce(ctx context.Context, db *v1alpha1.Database, obs *observation, target, typ, reason, msg string) error {
	if obs.written == nil {
		return nil
	}
	next := obs.written.DeepCopy()
	next.Status.TargetPrimary = target
	status := metav1.ConditionTrue
	if typ == v1alpha1.ConditionReady {
		status = metav1.ConditionFalse
	}
	conditions.Set(&next.Status.Conditions, db.Generation, typ, status, reason, msg)
	if err := controller.PatchStatus(ctx, r.Client, obs.written, next, obs.written.Status, next.Status); err != nil {
		return err
	}
	// The final write patches from what the server now has.
	*obs.written = *next
	db.ResourceVersion = next.ResourceVersion
	return nil
}

// promote asks the instance manager of pod to promote, with the Database's
// API token; only the operator can read it. waitLSN, in a switchover, is the
// WAL the replica must have received first.
func (r *Reconciler) promote(ctx context.Context, db *v1alpha1.Database, obs *observation, pod, waitLSN string) error {
	call, err := r.promoteCall(ctx, db, obs, pod, waitLSN)
	if err != nil {
		return err
	}
	if err := call(); err != nil {
		return err
	}
	r.recordPromoted(ctx, db, pod, r.Clock.Now())
	return nil
}

// promoteCall readies promote's call of pod's instance manager: it reads
// the API token and pod's address first, so the call itself touches
// neither db nor obs, and failover runs it beside its status and label
// writes.
func (r *Reconciler) promoteCall(ctx context.Context, db *v1alpha1.Database, obs *observation, pod, waitLSN string) (func() error, error) {
	token, err := r.apiToken(ctx, db)
	if err != nil {
		return nil, err
	}
	t, err := r.targetOf(ctx, db, obs, pod)
	if err != nil {
		return nil, fmt.Errorf("cannot promote %s: %w", pod, err)
	}
	return func() error {
		if err := r.Instances.Promote(ctx, t, token, waitLSN); err != nil {
			return fmt.Errorf("failed to promote %s: %w", pod, err)
		}
		return nil
	}, nil
}

// recordPromoted notes pod's promotion (at time at) in the failover record under
// way, the metric and an Event.
func (r *Reconciler) recordPromoted(ctx context.Context, db *v1alpha1.Database, pod string, at time.Time) {
	now := metav1.NewTime(at)
	if f := db.Status.LastFailover; f != nil && f.To == pod && f.PromotedTime == nil {
		f.PromotedTime = &now
		if f.DetectedTime != nil {
			observeFailover(db, now.Sub(f.DetectedTime.Time))
		}
	}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, v1alpha1.ReasonFailover, "Promote", "Promoted %s to primary", pod)
}

// apiToken reads the token instance managers ask of whoever changes them.
func (r *Reconciler) apiToken(ctx context.Context, db *v1alpha1.Database) (string, error) {
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: apiSecretName(db)}, s); err != nil {
		return "", fmt.Errorf("failed to read the instance API token: %w", err)
	}
	return string(s.Data[v1alpha1.CredentialsPassword]), nil
}

// podIP is the address of the named pod's instance manager ("" if it has none).
func podIP(obs *observation, pod string) string {
	if p := podNamed(obs, pod); p != nil {
		return p.Status.PodIP
	}
	return ""
}

// leaseChanged lets through the Lease events failover acts on: a new
// holder, and a release (renewTime cleared). Renewals, once a second, are
// not events to reconcile on.
var leaseChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*coordinationv1.Lease)
		n, ok2 := e.ObjectNew.(*coordinationv1.Lease)
		if !ok1 || !ok2 {
			return true
		}
		return ptr.Deref(o.Spec.HolderIdentity, "") != ptr.Deref(n.Spec.HolderIdentity, "") ||
			(o.Spec.RenewTime == nil) != (n.Spec.RenewTime == nil)
	},
}
