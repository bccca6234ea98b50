package database

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// SwitchoverPatience is how long a switchover request waits for the
// Database to allow one (a streaming target, a primary holding its lease)
// before it is refused.
const SwitchoverPatience = 5 * time.Minute

// switchoverRequest is what the annotations ask for.
type switchoverRequest struct {
	at time.Time
	to string // empty: the best replica
}

// pendingSwitchover reads a switchover request that status.lastSwitchover
// has not answered yet. A time that does not parse is answered as refused.
func pendingSwitchover(db *v1alpha1.Database, lease *coordinationv1.Lease) (switchoverRequest, string, bool) {
	raw, ok := db.Annotations[v1alpha1.AnnotationSwitchoverRequested]
	if !ok {
		return switchoverRequest{}, "", false
	}
	at, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		msg := fmt.Sprintf("annotation %s must be an RFC 3339 time", v1alpha1.AnnotationSwitchoverRequested)
		// Answered once, not on every reconcile.
		last := db.Status.LastSwitchover
		return switchoverRequest{}, msg, last == nil || last.Result != v1alpha1.SwitchoverRefused || last.Message != msg
	}
	if last := db.Status.LastSwitchover; last != nil && !at.After(last.RequestedTime.Time) {
		return switchoverRequest{}, "", false
	}
	// The handover records the request too: a status write lost after it
	// must not make a second switchover.
	if done, err := time.Parse(time.RFC3339, lease.Annotations[instanceapi.AnnotationSwitchoverRequest]); err == nil && !at.After(done) {
		return switchoverRequest{}, "", false
	}
	return switchoverRequest{at: at, to: db.Annotations[v1alpha1.AnnotationSwitchoverTo]}, "", true
}

// switchoverDecision is what to do about a pending request: switch from
// one instance to another, wait (and say why), refuse it for good, or
// nothing (the target already is the primary).
type switchoverDecision struct {
	from, to     string
	wait, refuse string
	alreadyThere bool
}

// decideSwitchover is pure: a switchover needs a primary that holds a valid
// lease and answers, and a target replica that streams within
// ha.MaxFailoverLag of it. It never acts while the lease is not valid, so it
// cannot fight a failover.
func decideSwitchover(req switchoverRequest, lease ha.LeaseState, now time.Time, pods []string, instances []v1alpha1.InstanceStatus) switchoverDecision {
	if req.to != "" && !slices.Contains(pods, req.to) {
		return switchoverDecision{refuse: fmt.Sprintf("no instance is named %s", req.to)}
	}
	d := switchoverDecision{from: lease.Holder}
	if lease.Holder == "" || lease.Expired(now) {
		d.wait = "no primary holds a valid lease (a failover may be under way)"
	}
	if req.to == lease.Holder && d.wait == "" {
		return switchoverDecision{from: lease.Holder, to: req.to, alreadyThere: true}
	}
	var primaryLSN uint64
	var replicas []v1alpha1.InstanceStatus
	for _, in := range instances {
		switch {
		case in.Name == lease.Holder && in.Error == "" && in.Role == string(instanceapi.RolePrimary):
			primaryLSN, _ = postgres.ParseLSN(in.LSN)
		case in.Name != lease.Holder && in.Error == "" && in.Role == string(instanceapi.RoleReplica) && in.Streaming:
			replicas = append(replicas, in)
		}
	}
	if d.wait == "" && primaryLSN == 0 {
		d.wait = fmt.Sprintf("the primary %s does not answer", lease.Holder)
	}
	best, bestLSN := "", uint64(0)
	for _, in := range replicas {
		got, ok := postgres.ParseLSN(in.ReceivedLSN)
		if !ok || (req.to != "" && in.Name != req.to) || (primaryLSN > got && primaryLSN-got > ha.MaxFailoverLag) {
			continue
		}
		if best == "" || got > bestLSN {
			best, bestLSN = in.Name, got
		}
	}
	switch {
	case best == "" && req.to != "":
		d.to = req.to
		d.wait = cmp.Or(d.wait, fmt.Sprintf("%s does not stream from the primary within %d bytes", req.to, ha.MaxFailoverLag))
	case best == "" && len(pods) < 2:
		d.refuse = "a Database with one instance has no replica to switch over to"
	case best == "":
		d.wait = cmp.Or(d.wait, fmt.Sprintf("no replica streams from the primary within %d bytes", ha.MaxFailoverLag))
	default:
		d.to = best
	}
	if d.refuse == "" && d.wait != "" && now.Sub(req.at) > SwitchoverPatience {
		d.refuse, d.wait = fmt.Sprintf("waited %s: %s", SwitchoverPatience, d.wait), ""
	}
	return d
}

// switchover carries out decideSwitchover: the primary shuts down cleanly
// and hands the lease to the target, which is promoted once it has received
// the old primary's last WAL. The outcome is recorded in
// status.lastSwitchover; a failed step is not retried, the request is
// answered.
func (r *Reconciler) switchover(ctx context.Context, db *v1alpha1.Database, obs *observation) (reconcile.Result, error) {
	if obs.lease == nil {
		return reconcile.Result{}, nil
	}
	req, invalid, ok := pendingSwitchover(db, obs.lease)
	if !ok {
		return reconcile.Result{}, nil
	}
	rec := &v1alpha1.SwitchoverRecord{RequestedTime: metav1.NewTime(req.at), To: req.to}
	if invalid != "" {
		rec.RequestedTime = metav1.NewTime(r.Clock.Now())
		r.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverRefused, invalid)
		return reconcile.Result{}, nil
	}
	d := decideSwitchover(req, ha.LeaseStateOf(obs.lease), r.Clock.Now(), podNames(obs.pods), obs.instanceStatuses)
	rec.From, rec.To = d.from, cmp.Or(d.to, req.to)
	switch {
	case d.refuse != "":
		r.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverRefused, d.refuse)
		return reconcile.Result{}, nil
	case d.wait != "":
		obs.switchoverWaiting = d.wait
		return reconcile.Result{RequeueAfter: time.Second}, nil
	case d.alreadyThere:
		r.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverSucceeded, fmt.Sprintf("%s already is the primary", d.to))
		return reconcile.Result{}, nil
	}
	return r.handOver(ctx, db, obs, rec, req.at, "")
}

// handOver carries out a switchover decided from d.from to d.to (rec names
// them): the primary shuts down cleanly and hands the lease over, and the
// target is promoted once it has the primary's last WAL. request stamps
// the handover, so a status write lost after it cannot make a second one;
// why ends the message.
func (r *Reconciler) handOver(ctx context.Context, db *v1alpha1.Database, obs *observation, rec *v1alpha1.SwitchoverRecord,
	request time.Time, why string) (reconcile.Result, error) {
	from, to := rec.From, rec.To
	if podIP(obs, from) == "" || podIP(obs, to) == "" {
		obs.switchoverWaiting = fmt.Sprintf("%s or %s has no pod IP", from, to)
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	fromAPI, err := r.targetOf(ctx, db, obs, from)
	if err != nil {
		return reconcile.Result{}, err
	}
	toAPI, err := r.targetOf(ctx, db, obs, to)
	if err != nil {
		return reconcile.Result{}, err
	}
	rec.StartedTime = ptr.To(metav1.NewTime(r.Clock.Now()))
	token, err := r.apiToken(ctx, db)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.announce(ctx, db, obs, to, v1alpha1.ConditionProgressing, v1alpha1.ReasonSwitchingOver,
		fmt.Sprintf("Switching over from %s to %s%s", from, to, why)); err != nil {
		return reconcile.Result{}, err
	}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, v1alpha1.ReasonSwitchover, "Demote", "Asking %s to step down for %s%s", from, to, why)
	obs.handedOver = true
	// A checkpoint while the primary still serves leaves its shutdown
	// checkpoint little to write; a failed one only makes that slower.
	if err := r.Instances.Checkpoint(ctx, fromAPI, token); err != nil {
		controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, v1alpha1.ReasonSwitchover, "Checkpoint",
			"CHECKPOINT on %s before it steps down failed (its shutdown writes it): %v", from, err)
	}
	// -rw moves to the target only once it is promoted: until kube-proxy
	// applies that, the old primary forwards new connections to the target
	// (the instance manager's forwarder), which serves writes from its
	// promotion on. Moved earlier, -rw would send them to a server that
	// still refuses writes.
	res, err := r.Instances.Demote(ctx, fromAPI, token,
		instanceapi.DemoteRequest{To: to, Request: request.UTC().Format(time.RFC3339)})
	if err != nil {
		r.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverFailed, "the primary did not step down: "+err.Error())
		return reconcile.Result{RequeueAfter: time.Second}, nil //nolint:nilerr // answered in the switchover's status; the Database is fine
	}
	rec.LSN = res.LSN
	obs.primary = to
	if err := r.Instances.Promote(ctx, toAPI, token, res.LSN); err != nil {
		// The lease names the target: failover promotes it once it can (see failover).
		r.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverFailed, fmt.Sprintf("%s holds the lease but did not promote yet: %v", to, err))
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	rec.PromotedTime = ptr.To(metav1.NewTime(r.Clock.Now()))
	r.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverSucceeded,
		fmt.Sprintf("%s is the primary; %s stepped down cleanly at %s%s", to, from, res.LSN, why))
	observeSwitchover(db, rec.PromotedTime.Sub(rec.StartedTime.Time))
	return reconcile.Result{RequeueAfter: time.Second}, r.labelRoles(ctx, obs.pods, to)
}

// autoSwitchover hands the primary over to the best replica among
// instances, for a reason of the operator's own that why states. It waits,
// and says why, while none can take over; a requested switchover waiting
// for its turn comes first.
func (r *Reconciler) autoSwitchover(ctx context.Context, db *v1alpha1.Database, obs *observation,
	instances []v1alpha1.InstanceStatus, why string) (reconcile.Result, error) {
	if obs.switchoverWaiting != "" {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	now := r.Clock.Now()
	d := decideSwitchover(switchoverRequest{at: now}, ha.LeaseStateOf(obs.lease), now, podNames(obs.pods), instances)
	if d.to == "" || d.wait != "" || d.refuse != "" {
		obs.switchoverWaiting = fmt.Sprintf("%s: %s", why, cmp.Or(d.wait, d.refuse))
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	rec := &v1alpha1.SwitchoverRecord{RequestedTime: metav1.NewTime(now), From: d.from, To: d.to}
	return r.handOver(ctx, db, obs, rec, now, ", "+why)
}

// switchoverForDrain moves the primary off a cordoned node, as a drain
// does first, to a replica on a node that is not cordoned; the primary's
// PodDisruptionBudget refuses its eviction until then.
func (r *Reconciler) switchoverForDrain(ctx context.Context, db *v1alpha1.Database, obs *observation) (reconcile.Result, error) {
	if len(obs.pods) < 2 || obs.lease == nil || obs.handedOver {
		return reconcile.Result{}, nil
	}
	cordoned := map[string]string{} // pod name: its cordoned node
	for i := range obs.pods {
		p := &obs.pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return reconcile.Result{}, fmt.Errorf("failed to get node %s: %w", p.Spec.NodeName, err)
		}
		if node.Spec.Unschedulable {
			cordoned[p.Name] = node.Name
		}
	}
	node, ok := cordoned[obs.primary]
	if !ok {
		return reconcile.Result{}, nil
	}
	if len(cordoned) == len(obs.pods) {
		obs.switchoverWaiting = fmt.Sprintf("the primary's node %s is cordoned, and so is every other instance's node", node)
		return reconcile.Result{}, nil // a node's uncordon wakes us
	}
	instances := slices.DeleteFunc(slices.Clone(obs.instanceStatuses), func(s v1alpha1.InstanceStatus) bool {
		_, c := cordoned[s.Name]
		return c && s.Name != obs.primary
	})
	return r.autoSwitchover(ctx, db, obs, instances, fmt.Sprintf("off the primary's cordoned node %s", node))
}

// switchoverForScaleDown moves the primary, before a scale-down removes
// its pod (the highest ordinals go), to the best replica that stays: a
// planned change is never a failover.
func (r *Reconciler) switchoverForScaleDown(ctx context.Context, db *v1alpha1.Database, obs *observation) (reconcile.Result, error) {
	if !obs.shrinkHeld || obs.lease == nil || obs.handedOver {
		return reconcile.Result{}, nil
	}
	instances := slices.DeleteFunc(slices.Clone(obs.instanceStatuses), func(s v1alpha1.InstanceStatus) bool {
		return ordinal(s.Name) >= int(obs.plan.instances) && s.Name != obs.primary
	})
	return r.autoSwitchover(ctx, db, obs, instances,
		fmt.Sprintf("scaling down to %d instances removes %s, the primary", obs.plan.instances, obs.primary))
}

func podNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for i := range pods {
		names = append(names, pods[i].Name)
	}
	return names
}

// answerSwitchover records the outcome of a request with an Event.
func (r *Reconciler) answerSwitchover(ctx context.Context, db *v1alpha1.Database, rec *v1alpha1.SwitchoverRecord, result v1alpha1.SwitchoverResult, msg string) {
	rec.Result, rec.Message = result, controller.Truncate(msg, 512)
	db.Status.LastSwitchover = rec
	typ := corev1.EventTypeNormal
	if result != v1alpha1.SwitchoverSucceeded {
		typ = corev1.EventTypeWarning
	}
	controller.Event(ctx, r.Recorder, db, nil, typ, v1alpha1.ReasonSwitchover, string(result), "Switchover %s: %s", result, rec.Message)
	countSwitchover(db, result)
}
