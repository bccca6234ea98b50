package database

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
