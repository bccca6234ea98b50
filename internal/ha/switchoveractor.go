package ha

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
// MaxFailoverLag of it. It never acts while the lease is not valid, so it
// cannot fight a failover.
func decideSwitchover(req switchoverRequest, lease LeaseState, now time.Time, pods []string, instances []v1alpha1.InstanceStatus) switchoverDecision {
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
		case in.Name != lease.Holder && in.Error == "" && in.Role == string(instanceapi.RoleReplica) && in.Streaming && !in.FencedOnRequest:
			replicas = append(replicas, in)
		}
	}
	if d.wait == "" && primaryLSN == 0 {
		d.wait = fmt.Sprintf("the primary %s does not answer", lease.Holder)
	}
	best, bestLSN := "", uint64(0)
	for _, in := range replicas {
		got, ok := postgres.ParseLSN(in.ReceivedLSN)
		if !ok || (req.to != "" && in.Name != req.to) || (primaryLSN > got && primaryLSN-got > MaxFailoverLag) {
			continue
		}
		if best == "" || got > bestLSN {
			best, bestLSN = in.Name, got
		}
	}
	switch {
	case best == "" && req.to != "":
		d.to = req.to
		d.wait = cmp.Or(d.wait, fmt.Sprintf("%s does not stream from the primary within %d bytes", req.to, MaxFailoverLag))
	case best == "" && len(pods) < 2:
		d.refuse = "a Database with one instance has no replica to switch over to"
	case best == "":
		d.wait = cmp.Or(d.wait, fmt.Sprintf("no replica streams from the primary within %d bytes", MaxFailoverLag))
	default:
		d.to = best
	}
	if d.refuse == "" && d.wait != "" && now.Sub(req.at) > SwitchoverPatience {
		d.refuse, d.wait = fmt.Sprintf("waited %s: %s", SwitchoverPatience, d.wait), ""
	}
	return d
}

// Switchover carries out decideSwitchover: the primary shuts down cleanly
// and hands the lease to the target, which is promoted once it has received
// the old primary's last WAL. The outcome is recorded in
// status.lastSwitchover; a failed step is not retried, the request is
// answered.
func (a *Actor) Switchover(ctx context.Context, db *v1alpha1.Database, v *View) (reconcile.Result, error) {
	if v.Lease == nil {
		return reconcile.Result{}, nil
	}
	req, invalid, ok := pendingSwitchover(db, v.Lease)
	if !ok {
		return reconcile.Result{}, nil
	}
	rec := &v1alpha1.SwitchoverRecord{RequestedTime: metav1.NewTime(req.at), To: req.to}
	if invalid != "" {
		rec.RequestedTime = metav1.NewTime(a.Clock.Now())
		a.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverRefused, invalid)
		return reconcile.Result{}, nil
	}
	d := decideSwitchover(req, LeaseStateOf(v.Lease), a.Clock.Now(), PodNames(v.Pods), v.InstanceStatuses)
	rec.From, rec.To = d.from, cmp.Or(d.to, req.to)
	switch {
	case d.refuse != "":
		a.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverRefused, d.refuse)
		return reconcile.Result{}, nil
	case d.wait != "":
		v.SwitchoverWaiting = d.wait
		return reconcile.Result{RequeueAfter: time.Second}, nil
	case d.alreadyThere:
		a.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverSucceeded, fmt.Sprintf("%s already is the primary", d.to))
		return reconcile.Result{}, nil
	}
	return a.handOver(ctx, db, v, rec, req.at, "")
}

// handOver carries out a switchover decided from d.from to d.to (rec names
// them): the primary shuts down cleanly and hands the lease over, and the
// target is promoted once it has the primary's last WAL. request stamps
// the handover, so a status write lost after it cannot make a second one;
// why ends the message.
func (a *Actor) handOver(ctx context.Context, db *v1alpha1.Database, v *View, rec *v1alpha1.SwitchoverRecord,
	request time.Time, why string) (reconcile.Result, error) {
	from, to := rec.From, rec.To
	if v.PodIP(from) == "" || v.PodIP(to) == "" {
		v.SwitchoverWaiting = fmt.Sprintf("%s or %s has no pod IP", from, to)
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	fromAPI, err := a.targetOf(ctx, db, v, from)
	if err != nil {
		return reconcile.Result{}, err
	}
	toAPI, err := a.targetOf(ctx, db, v, to)
	if err != nil {
		return reconcile.Result{}, err
	}
	rec.StartedTime = ptr.To(metav1.NewTime(a.Clock.Now()))
	token, err := a.Host.APIToken(ctx, db)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := a.announce(ctx, db, v, to, v1alpha1.ConditionProgressing, v1alpha1.ReasonSwitchingOver,
		fmt.Sprintf("Switching over from %s to %s%s", from, to, why)); err != nil {
		return reconcile.Result{}, err
	}
	controller.Event(ctx, a.Recorder, db, nil, corev1.EventTypeNormal, v1alpha1.ReasonSwitchover, "Demote", "Asking %s to step down for %s%s", from, to, why)
	v.HandedOver = true
	// A checkpoint while the primary still serves leaves its shutdown
	// checkpoint little to write; a failed one only makes that slower.
	if err := a.Instances.Checkpoint(ctx, fromAPI, token); err != nil {
		controller.Event(ctx, a.Recorder, db, nil, corev1.EventTypeWarning, v1alpha1.ReasonSwitchover, "Checkpoint",
			"CHECKPOINT on %s before it steps down failed (its shutdown writes it): %v", from, err)
	}
	// The pools hold new transactions, once those under way finished,
	// until the target serves: their clients wait instead of failing.
	// They resume on every way out, after the pods' roles are labelled.
	resume := a.Host.PausePools(ctx, db)
	defer resume(context.WithoutCancel(ctx))
	// -rw moves to the target only once it is promoted: until kube-proxy
	// applies that, the old primary forwards new connections to the target
	// (the instance manager's forwarder), which serves writes from its
	// promotion on. Moved earlier, -rw would send them to a server that
	// still refuses writes.
	res, err := a.Instances.Demote(ctx, fromAPI, token,
		instanceapi.DemoteRequest{To: to, Request: request.UTC().Format(time.RFC3339)})
	if err != nil {
		a.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverFailed, "the primary did not step down: "+err.Error())
		// Answered in the switchover's status; the Database is fine.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	rec.LSN = res.LSN
	v.Primary = to
	if err := a.Instances.Promote(ctx, toAPI, token, res.LSN); err != nil {
		// The lease names the target: failover promotes it once it can (see failover).
		a.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverFailed, fmt.Sprintf("%s holds the lease but did not promote yet: %v", to, err))
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	rec.PromotedTime = ptr.To(metav1.NewTime(a.Clock.Now()))
	a.answerSwitchover(ctx, db, rec, v1alpha1.SwitchoverSucceeded,
		fmt.Sprintf("%s is the primary; %s stepped down cleanly at %s%s", to, from, res.LSN, why))
	observeSwitchover(db, rec.PromotedTime.Sub(rec.StartedTime.Time))
	return reconcile.Result{RequeueAfter: time.Second}, a.Host.LabelRoles(ctx, v.Pods, to)
}

// AutoSwitchover hands the primary over to the best replica among
// instances, for a reason of the operator's own that why states. It waits,
// and says why, while none can take over; a requested switchover waiting
// for its turn comes first.
func (a *Actor) AutoSwitchover(ctx context.Context, db *v1alpha1.Database, v *View,
	instances []v1alpha1.InstanceStatus, why string) (reconcile.Result, error) {
	if v.SwitchoverWaiting != "" {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	now := a.Clock.Now()
	d := decideSwitchover(switchoverRequest{at: now}, LeaseStateOf(v.Lease), now, PodNames(v.Pods), instances)
	if d.to == "" || d.wait != "" || d.refuse != "" {
		v.SwitchoverWaiting = fmt.Sprintf("%s: %s", why, cmp.Or(d.wait, d.refuse))
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	rec := &v1alpha1.SwitchoverRecord{RequestedTime: metav1.NewTime(now), From: d.from, To: d.to}
	return a.handOver(ctx, db, v, rec, now, ", "+why)
}

// SwitchoverForDrain moves the primary off a cordoned node, as a drain
// does first, to a replica on a node that is not cordoned; the primary's
// PodDisruptionBudget refuses its eviction until then.
func (a *Actor) SwitchoverForDrain(ctx context.Context, db *v1alpha1.Database, v *View) (reconcile.Result, error) {
	if len(v.Pods) < 2 || v.Lease == nil || v.HandedOver {
		return reconcile.Result{}, nil
	}
	cordoned := map[string]string{} // pod name: its cordoned node
	for i := range v.Pods {
		p := &v.Pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		node := &corev1.Node{}
		if err := a.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return reconcile.Result{}, fmt.Errorf("failed to get node %s: %w", p.Spec.NodeName, err)
		}
		if node.Spec.Unschedulable {
			cordoned[p.Name] = node.Name
		}
	}
	node, ok := cordoned[v.Primary]
	if !ok {
		return reconcile.Result{}, nil
	}
	if len(cordoned) == len(v.Pods) {
		v.SwitchoverWaiting = fmt.Sprintf("the primary's node %s is cordoned, and so is every other instance's node", node)
		return reconcile.Result{}, nil // a node's uncordon wakes us
	}
	instances := slices.DeleteFunc(slices.Clone(v.InstanceStatuses), func(s v1alpha1.InstanceStatus) bool {
		_, c := cordoned[s.Name]
		return c && s.Name != v.Primary
	})
	return a.AutoSwitchover(ctx, db, v, instances, fmt.Sprintf("off the primary's cordoned node %s", node))
}

// SwitchoverForScaleDown moves the primary, before a scale-down removes
// its pod (the highest ordinals go), to the best replica that stays: a
// planned change is never a failover.
func (a *Actor) SwitchoverForScaleDown(ctx context.Context, db *v1alpha1.Database, v *View) (reconcile.Result, error) {
	if !v.ShrinkHeld || v.Lease == nil || v.HandedOver {
		return reconcile.Result{}, nil
	}
	instances := slices.DeleteFunc(slices.Clone(v.InstanceStatuses), func(s v1alpha1.InstanceStatus) bool {
		return Ordinal(s.Name) >= int(v.WantInstances) && s.Name != v.Primary
	})
	return a.AutoSwitchover(ctx, db, v, instances,
		fmt.Sprintf("scaling down to %d instances removes %s, the primary", v.WantInstances, v.Primary))
}

// PodNames are the names of pods, in order.
func PodNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for i := range pods {
		names = append(names, pods[i].Name)
	}
	return names
}

// answerSwitchover records the outcome of a request with an Event.
func (a *Actor) answerSwitchover(ctx context.Context, db *v1alpha1.Database, rec *v1alpha1.SwitchoverRecord, result v1alpha1.SwitchoverResult, msg string) {
	rec.Result, rec.Message = result, controller.Truncate(msg, 512)
	db.Status.LastSwitchover = rec
	typ := corev1.EventTypeNormal
	if result != v1alpha1.SwitchoverSucceeded {
		typ = corev1.EventTypeWarning
	}
	controller.Event(ctx, a.Recorder, db, nil, typ, v1alpha1.ReasonSwitchover, string(result), "Switchover %s: %s", result, rec.Message)
	countSwitchover(db, result)
}
