package database

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// ensurePrimaryLease creates the primary Lease once, and lets the instance
// managers read and renew it. The operator never applies the Lease: its
// holder is the one fact failover changes.
func (r *Reconciler) ensurePrimaryLease(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[corev1.ServiceAccount](db.Namespace, instanceAccountName(db)),
		instanceServiceAccount(db), corev1ac.ExtractServiceAccount, "ServiceAccount"); err != nil {
		return err
	}
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[rbacv1.Role](db.Namespace, instanceAccountName(db)),
		instanceRole(db), rbacv1ac.ExtractRole, "Role"); err != nil {
		return err
	}
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[rbacv1.RoleBinding](db.Namespace, instanceAccountName(db)),
		instanceRoleBinding(db), rbacv1ac.ExtractRoleBinding, "RoleBinding"); err != nil {
		return err
	}
	l := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}
	err := r.Client.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		// Not in the cache yet, or really missing: the API server decides.
		if err = r.APIReader.Get(ctx, key, l); apierrors.IsNotFound(err) {
			l = primaryLease(db)
			if err := controllerutil.SetControllerReference(db, l, r.Client.Scheme()); err != nil {
				return err
			}
			if err := r.Client.Create(ctx, l); err != nil {
				return fmt.Errorf("failed to create Lease %s: %w", l.Name, err)
			}
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get Lease %s: %w", key.Name, err)
	}
	obs.lease = l
	obs.primary = ha.LeaseStateOf(l).Holder
	return nil
}

// failover carries out decideFailover: it moves an expired lease to the
// best replica and asks it to promote, and promotes a holder still running
// as a replica (a promotion an earlier reconcile could not finish). While
// the lease is valid it comes back when the lease would expire, since a
// frozen primary sends no event.
func (r *Reconciler) failover(ctx context.Context, db *v1alpha1.Database, obs *observation) (reconcile.Result, error) {
	if obs.lease == nil {
		return reconcile.Result{}, nil
	}
	st := ha.LeaseStateOf(obs.lease)
	now := r.Clock.Now()
	handover := obs.lease.Annotations[instanceapi.AnnotationHandoverLSN]
	if st.Expired(now) && handover != "" && holderIsReplica(obs, st.Holder) && !handoverExpired(obs.lease, now) {
		// A switchover's target that answers but is not promoted yet (its
		// promote failed or timed out) keeps the lease for a while: the old
		// primary stopped cleanly, and the target should hold all of it.
		// Past HandoverPatience, failover weighs every replica, the old
		// primary (a replica now, holding all it wrote) included.
		if err := r.extendLease(ctx, obs); err != nil {
			return reconcile.Result{}, err
		}
		st = ha.LeaseStateOf(obs.lease)
	}
	waited := time.Duration(0)
	if !st.Expired(now) && !holderIsReplica(obs, st.Holder) {
		if waited = r.awaitRelease(ctx, db, obs, st.Holder); waited > 0 {
			st, now = ha.LeaseStateOf(obs.lease), r.Clock.Now()
		}
	}
	if !st.Expired(now) {
		if holderIsReplica(obs, st.Holder) {
			// A switchover's handover names the WAL the holder must have first.
			return reconcile.Result{}, r.promote(ctx, db, obs, st.Holder, obs.lease.Annotations[instanceapi.AnnotationHandoverLSN])
		}
		return reconcile.Result{RequeueAfter: st.Expires.Sub(now) + 100*time.Millisecond}, nil
	}
	if waited == 0 && len(obs.pods) > 1 {
		// Positions read now, after the expiry, when the old primary
		// fenced already: what the replicas said before may lack commits
		// it acknowledged since, and failover must weigh every one.
		obs.instanceStatuses, obs.instances = r.askInstances(ctx, db, obs.pods, st.Holder, true)
	}
	d := ha.DecideFailover(st.WithVouchedLSN(obs.instances), now, obs.instanceStatuses)
	if d.OnPromises != "" {
		obs.servingOnPromises = d.OnPromises
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if d.Promote == "" {
		// A lease never taken is a Database still bootstrapping; with a
		// single instance there is no one to fail over to.
		if obs.lease.Spec.AcquireTime == nil || len(obs.pods) < 2 {
			return reconcile.Result{}, nil
		}
		obs.failoverWaiting = d.Waiting
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	reason := "its lease expired"
	if obs.lease.Spec.RenewTime == nil {
		reason = "it released its lease (shut down)"
	}
	l := obs.lease.DeepCopy()
	t := metav1.NewMicroTime(now)
	// The term too: a lease made anew records none until its holder renews.
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To(d.Promote), &t, &t
	l.Spec.LeaseDurationSeconds = ptr.To(int32(instanceapi.LeaseDuration / time.Second))
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	// A failover accepts what the chosen replica lacks (lagBytes): an
	// earlier handover's LSN must not block its promotion.
	delete(l.Annotations, instanceapi.AnnotationHandoverLSN)
	// The old holder's vouchers bind the old term only; a holder that
	// released the lease stopped serving, so promises made to it do not
	// hold the promotion up.
	delete(l.Annotations, instanceapi.AnnotationVouchers)
	delete(l.Annotations, instanceapi.AnnotationReleasedBy)
	if obs.lease.Spec.RenewTime == nil && l.Annotations != nil {
		l.Annotations[instanceapi.AnnotationReleasedBy] = st.Holder
	}
	// The new term's synchronous replication is what the new holder starts
	// with, not the old holder's (which names the new holder, and which
	// failover, never counting the holder, could then not satisfy before
	// the new holder's first renewal records its own).
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[instanceapi.AnnotationSync] = instanceapi.SynchronousStandbyNames(obs.plan.replication(db), d.Promote, nil)
	// The update carries the resourceVersion read: a renewal in between wins.
	if err := r.Client.Update(ctx, l); err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to move Lease %s to %s: %w", l.Name, d.Promote, err)
	}
	obs.lease, obs.primary = l, d.Promote
	logf.FromContext(ctx).Info("Moved the primary lease", "from", st.Holder, "to", d.Promote, "reason", reason,
		"sinceReconcileStart", time.Since(obs.started).Round(time.Millisecond).String(), "waitedForRelease", waited.Round(time.Millisecond).String())
	fenced := now
	if !st.Expires.IsZero() {
		fenced = st.Expires.Add(-instanceapi.LeaseFenceMargin)
	}
	db.Status.LastFailover = &v1alpha1.FailoverRecord{From: st.Holder, To: d.Promote, Reason: controller.Truncate(reason, 256),
		FencedTime: ptr.To(metav1.NewTime(fenced)), DetectedTime: ptr.To(metav1.NewTime(now)), LagBytes: d.LagBytes}
	controller.Event(ctx, r.Recorder, db, l, corev1.EventTypeWarning, v1alpha1.ReasonFailover, "Fence",
		"The primary %s lost its lease (%s); moved it to %s, which lacked %d bytes of WAL (replicas weighed: %s)",
		st.Holder, reason, d.Promote, d.LagBytes, strings.Join(d.Weighed, ", "))
	countFailover(db)
	// The promotion goes at once; the status and -rw's labels move
	// meanwhile, so kube-proxy catches up while the replica promotes.
	// Neither needs the other: the lease already names the replica, and
	// until -rw follows, the old primary (if alive) relays to the holder.
	call, callErr := r.promoteCall(ctx, db, obs, d.Promote, "")
	if callErr != nil {
		call = func() error { return callErr }
	}
	type answer struct {
		err error
		at  time.Time
	}
	promoted := make(chan answer, 1)
	go func() {
		err := call()
		promoted <- answer{err, r.Clock.Now()} // the promotion's time, not the status write's
	}()
	err := errors.Join(
		r.announce(ctx, db, obs, d.Promote, v1alpha1.ConditionReady, v1alpha1.ReasonFailingOver,
			fmt.Sprintf("Promoting %s: the primary %s lost its lease (%s)", d.Promote, st.Holder, reason)),
		r.labelRoles(ctx, obs.pods, d.Promote))
	a := <-promoted
	if a.err != nil {
		return reconcile.Result{}, errors.Join(a.err, err)
	}
	r.recordPromoted(ctx, db, d.Promote, a.at)
	return reconcile.Result{}, err
}

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
// positions read after the primary stopped. Instances from before
// instanceapi.QueryFresh answer with their last observation, which is at
// most a second old (the instance's observation period): past settleWait
// it postdates the stop.
const settleWait = 1500 * time.Millisecond

// settlePoll is how often failover asks the replicas again while their
// positions have not settled.
const settlePoll = 100 * time.Millisecond

// awaitRelease waits, when holder's pod is being deleted, until the lease
// no longer names holder within its term (released, expired or moved), and
// says how long it waited; zero means it did not, and obs is as it was.
// When it did, obs holds the lease read; after a release or an expiry also
// the pods listed again and the instances' statuses asked again
// (askAfterStop): what the replicas said before the primary stopped is not
// what failover weighs.
func (r *Reconciler) awaitRelease(ctx context.Context, db *v1alpha1.Database, obs *observation, holder string) time.Duration {
	p := podNamed(obs, holder)
	if p == nil || p.DeletionTimestamp.IsZero() || len(obs.pods) < 2 {
		return 0 // not being deleted, or no one to fail over to
	}
	// Real time, not r.Clock: this bounds a wait, not a lease.
	start := time.Now()
	l := r.pollRelease(ctx, obs.lease, holder, releaseDeadline(p, start))
	if l == nil {
		return 0
	}
	obs.lease, obs.primary = l, ha.LeaseStateOf(l).Holder
	if obs.primary == holder {
		r.askAfterStop(ctx, db, obs)
	} // else handed over: nothing to weigh
	return max(time.Since(start), time.Nanosecond)
}

// releaseDeadline is when awaitRelease gives up on p's release: releaseWait
// from its deletion, so the reconciles that follow it wait releaseWait in
// all, not each (a frozen primary never releases), and never past
// releaseWait from now.
func releaseDeadline(p *corev1.Pod, now time.Time) time.Time {
	asked := p.DeletionTimestamp.Time
	if g := p.DeletionGracePeriodSeconds; g != nil {
		asked = asked.Add(-time.Duration(*g) * time.Second) // the deletion timestamp is the end of the grace period
	}
	if d := asked.Add(releaseWait); d.Before(now.Add(releaseWait)) {
		return d
	}
	return now.Add(releaseWait)
}

// pollRelease reads the cached lease every releasePoll until it no longer
// names holder within its term, and returns it; nil once deadline passed,
// ctx ended, or the lease is gone or made anew (the next reconcile sees to
// those).
func (r *Reconciler) pollRelease(ctx context.Context, lease *coordinationv1.Lease, holder string, deadline time.Time) *coordinationv1.Lease {
	tick := time.NewTicker(releasePoll)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		l := &coordinationv1.Lease{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(lease), l); err != nil || l.UID != lease.UID {
			return nil
		}
		if st := ha.LeaseStateOf(l); st.Holder != holder || st.Expired(r.Clock.Now()) {
			return l
		}
	}
	return nil
}

// askAfterStop lists the pods again and asks the instances, with positions
// read for the answer, until positionsSettled. If the pods cannot be
// listed, failover weighs what it asked before.
func (r *Reconciler) askAfterStop(ctx context.Context, db *v1alpha1.Database, obs *observation) {
	stopped := time.Now()
	pods, err := r.listPods(ctx, db)
	if err != nil {
		return
	}
	obs.pods = pods
	for {
		obs.instanceStatuses, obs.instances = r.askInstances(ctx, db, obs.pods, "", true)
		if positionsSettled(obs.instances, time.Since(stopped)) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(settlePoll):
		}
	}
}

// positionsSettled: the replicas' answers postdate the primary's stop, so
// failover may weigh them. Every replica that reported WAL positions read
// them for the answer (instanceapi.QueryFresh), or since, settleWait
// passed, past any instance's observation period.
func positionsSettled(answers map[string]instanceapi.Status, since time.Duration) bool {
	if since >= settleWait {
		return true
	}
	for _, s := range answers {
		if s.Role == instanceapi.RoleReplica && (s.LSN != "" || s.ReceivedLSN != "") && !s.PositionsReadNow {
			return false
		}
	}
	return true
}

// HandoverPatience is how long a switchover's target keeps a lease it has
// not been promoted with (it lacks the old primary's last WAL, say) before
// failover chooses again among all replicas.
const HandoverPatience = 2 * time.Minute

// handoverExpired: the lease was handed over more than HandoverPatience ago.
func handoverExpired(l *coordinationv1.Lease, now time.Time) bool {
	return l.Spec.AcquireTime != nil && now.Sub(l.Spec.AcquireTime.Time) > HandoverPatience
}

// extendLease renews the lease for its holder, on the operator's side,
// with the resourceVersion read.
func (r *Reconciler) extendLease(ctx context.Context, obs *observation) error {
	l := obs.lease.DeepCopy()
	t := metav1.NewMicroTime(r.Clock.Now())
	l.Spec.RenewTime = &t
	if err := r.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("failed to extend Lease %s for %s: %w", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), err)
	}
	obs.lease = l
	return nil
}

// holderIsReplica: the lease names an instance that still reports itself a
// replica, so it waits to be promoted.
func holderIsReplica(obs *observation, holder string) bool {
	for _, s := range obs.instanceStatuses {
		if s.Name == holder {
			return s.Error == "" && s.Role == "replica"
		}
	}
	return false
}

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
