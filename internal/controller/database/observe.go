package database

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// observation is what a reconcile knows of the Database's world: the plan
// its spec makes, and what observe read (the StatefulSet, the pods, the
// instances' answers, the upgrade's Job and backup). observe decides
// nothing. A phase that changes the world records the change here (the
// Lease ensurePrimaryLease makes, the StatefulSet applyStatefulSet
// applies, the holder the HA actor moves the Lease to), so the phases
// after it act on the world as it now is; what a phase decides or finds
// goes in found, which the status is built from.
type observation struct {
	// View is what the HA phases (internal/ha.Actor) read and change:
	// the pods, the instances' answers, the Lease and its holder.
	ha.View
	plan plan
	now  time.Time
	sts  *appsv1.StatefulSet
	// upgradeJob is the major upgrade's Job, preBackup its pre-upgrade
	// DatabaseBackup.
	upgradeJob *batchv1.Job
	preBackup  *v1alpha1.DatabaseBackup

	found findings
}

// observe reads the live StatefulSet, the pods, the upgrade's objects and
// the instances' answers.
func (r *Reconciler) observe(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	obs.now = r.Clock.Now()
	sts := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to get StatefulSet: %w", err)
	}
	if err == nil {
		obs.sts = sts
	}
	if obs.Pods, err = r.listPods(ctx, db); err != nil {
		return err
	}
	if err := r.readUpgradeObjects(ctx, db, obs); err != nil {
		return err
	}
	// A primary whose renewed lease ran out is not asked: failover does not
	// weigh it, and a frozen one would hold the reconcile for the whole
	// timeout. (A switchover's target, holding a handed-over lease, is.)
	expired := ""
	if l := obs.Lease; l != nil && l.Spec.RenewTime != nil && l.Annotations[instanceapi.AnnotationHandoverLSN] == "" {
		if st := ha.LeaseStateOf(l); st.Expired(r.Clock.Now()) {
			expired = st.Holder
		}
	}
	obs.InstanceStatuses, obs.Instances = r.askInstances(ctx, db, obs.Pods, expired, false)
	return nil
}

// listPods lists db's pods from the cache, by ordinal: those its labels
// select, named as its StatefulSet names them, that db's own StatefulSet
// controls (by UID). A look-alike pod made by mistake (the labels copied)
// is then never asked, counted or promoted. It is no security boundary:
// whoever may create pods in the namespace may also mount its Secrets.
func (r *Reconciler) listPods(ctx context.Context, db *v1alpha1.Database) ([]corev1.Pod, error) {
	sts := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get StatefulSet: %w", err)
	}
	if !metav1.IsControlledBy(sts, db) {
		return nil, nil
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return nil, fmt.Errorf("failed to list pods: %w", err)
	}
	owned := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return !metav1.IsControlledBy(&p, sts) || ha.Ordinal(p.Name) < 0 || p.Name != podName(db, ha.Ordinal(p.Name))
	})
	slices.SortFunc(owned, func(a, b corev1.Pod) int { return ha.Ordinal(a.Name) - ha.Ordinal(b.Name) })
	return owned, nil
}

// restoring says whether pod's restore init container runs: its instance
// manager answers the API (a recovery's progress) before the pod runs.
func restoring(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name == containerRestore && cs.State.Running != nil {
			return true
		}
	}
	return false
}

// askInstances gets the status of every ready instance but skip from its
// instance manager, in parallel, with positions read for the answer when
// fresh. An instance that does not answer is listed with the error; it
// never fails the reconcile.
func (r *Reconciler) askInstances(ctx context.Context, db *v1alpha1.Database, pods []corev1.Pod, skip string, fresh bool) ([]v1alpha1.InstanceStatus, map[string]instanceapi.Status) {
	ask := r.Instances.Status
	if fresh {
		ask = r.Instances.FreshStatus
	}
	out := make([]v1alpha1.InstanceStatus, len(pods))
	answers := make([]*instanceapi.Status, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		pod := &pods[i]
		out[i].Name = pod.Name
		if pod.Name == skip {
			out[i].Error = "its primary lease expired: not asked"
			continue
		}
		// Not only ready pods: a replica that lost its primary stops being
		// ready, and failover needs to hear from it most.
		if pod.Status.PodIP == "" || !(pod.Status.Phase == corev1.PodRunning || restoring(pod)) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		t, err := r.target(ctx, db, pod)
		if err != nil {
			out[i].Error = "cannot reach its instance manager: " + err.Error()
			continue
		}
		wg.Go(func() {
			s, err := ask(ctx, t)
			if err != nil {
				out[i].Error = "the instance manager did not answer"
				return
			}
			if s.Pod != pod.Name {
				// The pod's IP answered for another instance (reused, or
				// stale): its status is not this pod's.
				out[i].Error = "another instance answered at its address: " + s.Pod
				return
			}
			answers[i] = &s
			out[i] = v1alpha1.InstanceStatus{Name: pod.Name, Role: string(s.Role), PostgresVersion: s.PostgresVersion,
				LSN: s.LSN, ReceivedLSN: s.ReceivedLSN, Timeline: int32(s.Timeline), Streaming: s.Streaming,
				PendingRestart: s.PendingRestartSettings, PromisedTo: s.PromisedTo, Superseded: s.Superseded, FencedOnRequest: s.FencedOnRequest}
		})
	}
	wg.Wait()
	byPod := map[string]instanceapi.Status{}
	for i, a := range answers {
		if a != nil {
			byPod[pods[i].Name] = *a
		}
	}
	return slices.DeleteFunc(out, func(s v1alpha1.InstanceStatus) bool { return s.Role == "" && s.Error == "" }), byPod
}
