package ha

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
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Failover carries out DecideFailover: it moves an expired lease to the
// best replica and asks it to promote, and promotes a holder still running
// as a replica (a promotion an earlier reconcile could not finish). While
// the lease is valid it comes back when the lease would expire, since a
// frozen primary sends no event.
func (a *Actor) Failover(ctx context.Context, db *v1alpha1.Database, v *View) (reconcile.Result, error) {
	if v.Lease == nil {
		return reconcile.Result{}, nil
	}
	st := LeaseStateOf(v.Lease)
	now := a.Clock.Now()
	handover := v.Lease.Annotations[instanceapi.AnnotationHandoverLSN]
	if st.Expired(now) && handover != "" && v.HolderIsReplica(st.Holder) && !handoverExpired(v.Lease, now) {
		// A switchover's target that answers but is not promoted yet (its
		// promote failed or timed out) keeps the lease for a while: the old
		// primary stopped cleanly, and the target should hold all of it.
		// Past HandoverPatience, failover weighs every replica, the old
		// primary (a replica now, holding all it wrote) included.
		if err := a.extendLease(ctx, v); err != nil {
			return reconcile.Result{}, err
		}
		st = LeaseStateOf(v.Lease)
	}
	waited := time.Duration(0)
	if !st.Expired(now) && !v.HolderIsReplica(st.Holder) {
		if waited = a.AwaitRelease(ctx, db, v, st.Holder); waited > 0 {
			st, now = LeaseStateOf(v.Lease), a.Clock.Now()
		}
	}
	if !st.Expired(now) {
		if v.HolderIsReplica(st.Holder) {
			// A switchover's handover names the WAL the holder must have first.
			return reconcile.Result{}, a.promote(ctx, db, v, st.Holder, v.Lease.Annotations[instanceapi.AnnotationHandoverLSN])
		}
		return reconcile.Result{RequeueAfter: st.Expires.Sub(now) + 100*time.Millisecond}, nil
	}
	if delay := db.FailoverDelay(); delay > 0 && !st.Expires.IsZero() && now.Before(st.Expires.Add(delay)) && !v.HolderIsReplica(st.Holder) &&
		handover == "" {
		// spec.ha.failoverDelaySeconds: a holder that comes back renews
		// its lease and serves on. A released lease (a clean stop) has
		// no expiry, and a switchover's target never served: neither is
		// delayed.
		v.FailoverWaiting = fmt.Sprintf("the lease of %s expired %s ago; failover waits spec.ha.failoverDelaySeconds (%s) for it to renew",
			st.Holder, now.Sub(st.Expires).Round(time.Second), delay)
		return reconcile.Result{RequeueAfter: st.Expires.Add(delay).Sub(now) + 100*time.Millisecond}, nil
	}
	if waited == 0 && len(v.Pods) > 1 {
		// Positions read now, after the expiry, when the old primary
		// fenced already: what the replicas said before may lack commits
		// it acknowledged since, and failover must weigh every one.
		v.InstanceStatuses, v.Instances = a.Host.AskInstances(ctx, db, v.Pods, st.Holder, true)
	}
	d := DecideFailover(st.WithVouchedLSN(v.Instances), now, v.InstanceStatuses)
	if d.OnPromises != "" {
		v.ServingOnPromises = d.OnPromises
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if d.Promote == "" {
		// A lease never taken is a Database still bootstrapping; with a
		// single instance there is no one to fail over to.
		if v.Lease.Spec.AcquireTime == nil || len(v.Pods) < 2 {
			return reconcile.Result{}, nil
		}
		v.FailoverWaiting = d.Waiting
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	reason := "its lease expired"
	if v.Lease.Spec.RenewTime == nil {
		reason = "it released its lease (shut down)"
	}
	l := v.Lease.DeepCopy()
	t := metav1.NewMicroTime(now)
	// The term too: a lease made anew records none until its holder renews.
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To(d.Promote), &t, &t
	// Never below the contract's default: an instance manager older than
	// spec.ha fences by it, whatever the Lease records.
	l.Spec.LeaseDurationSeconds = ptr.To(int32(max(db.LeaseDuration(), instanceapi.LeaseDuration) / time.Second))
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	// A failover accepts what the chosen replica lacks (lagBytes): an
	// earlier handover's LSN must not block its promotion.
	delete(l.Annotations, instanceapi.AnnotationHandoverLSN)
	// The old holder's vouchers bind the old term only; a holder that
	// released the lease stopped serving, so promises made to it do not
	// hold the promotion up.
	delete(l.Annotations, instanceapi.AnnotationVouchers)
	// A demoted Database's token said where its last primary stopped.
	delete(l.Annotations, instanceapi.AnnotationDemotionToken)
	delete(l.Annotations, instanceapi.AnnotationReleasedBy)
	if v.Lease.Spec.RenewTime == nil && l.Annotations != nil {
		l.Annotations[instanceapi.AnnotationReleasedBy] = st.Holder
	}
	// The new term's synchronous replication is what the new holder starts
	// with, not the old holder's (which names the new holder, and which
	// failover, never counting the holder, could then not satisfy before
	// the new holder's first renewal records its own).
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[instanceapi.AnnotationSync] = instanceapi.SynchronousStandbyNames(v.Replication, d.Promote, nil)
	// The update carries the resourceVersion read: a renewal in between wins.
	if err := a.Client.Update(ctx, l); err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to move Lease %s to %s: %w", l.Name, d.Promote, err)
	}
	v.Lease, v.Primary = l, d.Promote
	logf.FromContext(ctx).Info("Moved the primary lease", "from", st.Holder, "to", d.Promote, "reason", reason,
		"sinceReconcileStart", time.Since(v.Started).Round(time.Millisecond).String(), "waitedForRelease", waited.Round(time.Millisecond).String())
	fenced := now
	if !st.Expires.IsZero() {
		fenced = st.Expires.Add(-instanceapi.LeaseFenceMargin)
	}
	db.Status.LastFailover = &v1alpha1.FailoverRecord{From: st.Holder, To: d.Promote, Reason: controller.Truncate(reason, 256),
		FencedTime: ptr.To(metav1.NewTime(fenced)), DetectedTime: ptr.To(metav1.NewTime(now)), LagBytes: d.LagBytes}
	controller.Event(ctx, a.Recorder, db, l, corev1.EventTypeWarning, v1alpha1.ReasonFailover, "Fence",
		"The primary %s lost its lease (%s); moved it to %s, which lacked %d bytes of WAL (replicas weighed: %s)",
		st.Holder, reason, d.Promote, d.LagBytes, strings.Join(d.Weighed, ", "))
	countFailover(db)
	// The promotion goes at once; the status and -rw's labels move
	// meanwhile, so kube-proxy catches up while the replica promotes.
	// Neither needs the other: the lease already names the replica, and
	// until -rw follows, the old primary (if alive) relays to the holder.
	call, callErr := a.promoteCall(ctx, db, v, d.Promote, "")
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
		promoted <- answer{err, a.Clock.Now()} // the promotion's time, not the status write's
	}()
	err := errors.Join(
		a.announce(ctx, db, v, d.Promote, v1alpha1.ConditionReady, v1alpha1.ReasonFailingOver,
			fmt.Sprintf("Promoting %s: the primary %s lost its lease (%s)", d.Promote, st.Holder, reason)),
		a.Host.LabelRoles(ctx, v.Pods, d.Promote))
	ans := <-promoted
	if ans.err != nil {
		return reconcile.Result{}, errors.Join(ans.err, err)
	}
	a.recordPromoted(ctx, db, d.Promote, ans.at)
	return reconcile.Result{}, err
}

// AwaitRelease waits, when holder's pod is being deleted, until the lease
// no longer names holder within its term (released, expired or moved), and
// says how long it waited; zero means it did not, and v is as it was.
// When it did, v holds the lease read; after a release or an expiry also
// the pods listed again and the instances' statuses asked again
// (askAfterStop): what the replicas said before the primary stopped is not
// what failover weighs.
func (a *Actor) AwaitRelease(ctx context.Context, db *v1alpha1.Database, v *View, holder string) time.Duration {
	p := v.PodNamed(holder)
	if p == nil || p.DeletionTimestamp.IsZero() || len(v.Pods) < 2 {
		return 0 // not being deleted, or no one to fail over to
	}
	// Real time, not a.Clock: this bounds a wait, not a lease.
	start := time.Now()
	l := a.pollRelease(ctx, v.Lease, holder, releaseDeadline(p, start))
	if l == nil {
		return 0
	}
	v.Lease, v.Primary = l, LeaseStateOf(l).Holder
	if v.Primary == holder {
		a.askAfterStop(ctx, db, v)
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
func (a *Actor) pollRelease(ctx context.Context, lease *coordinationv1.Lease, holder string, deadline time.Time) *coordinationv1.Lease {
	tick := time.NewTicker(releasePoll)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		l := &coordinationv1.Lease{}
		if err := a.Client.Get(ctx, client.ObjectKeyFromObject(lease), l); err != nil || l.UID != lease.UID {
			return nil
		}
		if st := LeaseStateOf(l); st.Holder != holder || st.Expired(a.Clock.Now()) {
			return l
		}
	}
	return nil
}

// askAfterStop lists the pods again and asks the instances, with positions
// read for the answer, until positionsSettled. If the pods cannot be
// listed, failover weighs what it asked before.
func (a *Actor) askAfterStop(ctx context.Context, db *v1alpha1.Database, v *View) {
	stopped := time.Now()
	pods, err := a.Host.ListPods(ctx, db)
	if err != nil {
		return
	}
	v.Pods = pods
	for {
		v.InstanceStatuses, v.Instances = a.Host.AskInstances(ctx, db, v.Pods, "", true)
		if positionsSettled(v.Instances, time.Since(stopped)) {
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
