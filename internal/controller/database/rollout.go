package database

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// rolloutPoll is how often an image rollout with a pod not yet ready is
// looked at again, so its deadline is noticed without a pod event.
const rolloutPoll = 10 * time.Second

// failFast are container waiting reasons no amount of waiting fixes.
var failFast = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"InvalidImageName": true, "CrashLoopBackOff": true, "CreateContainerError": true,
}

// decideImage works out which image the StatefulSet should carry. It holds
// a major version change (refused) and an image whose rollout failed (rolled
// back to the last image every instance ran ready).
func (r *Reconciler) decideImage(ctx context.Context, db *v1alpha1.Database, obs *observation) stsInputs {
	in := stsInputs{instanceImage: r.InstanceImage, image: obs.plan.image, major: db.Spec.Version}
	live := obs.sts
	if live == nil {
		return in
	}
	if m := live.Annotations[annMajor]; m != "" {
		in.major = m
	}
	if c := live.Spec.VolumeClaimTemplates; len(c) > 0 {
		q := c[0].Spec.Resources.Requests[corev1.ResourceStorage]
		in.claimSize = &q
	}
	in.goodImage, in.failedImage = live.Annotations[annGoodImage], live.Annotations[annFailedImage]
	in.runningParams = live.Annotations[annRunningParameters]
	obs.found.templateImage = containerImage(&live.Spec.Template.Spec)
	if rolloutComplete(live, obs.Pods) {
		in.goodImage = obs.found.templateImage
		in.runningParams = live.Spec.Template.Annotations[annRestartParameters]
	}
	if in.major == db.Spec.Version && db.Spec.Image == "" && in.image != obs.found.templateImage &&
		olderThanRunning(in.image, obs.found.templateImage, in.goodImage, obs.InstanceStatuses) {
		// The pinned default of a newer operator is never a downgrade: the
		// instances keep what they run until spec.image says otherwise.
		controller.Event(ctx, r.Recorder, db, live, corev1.EventTypeWarning, "DefaultImageOlder", "Rollout",
			"The default image %s is older than the PostgreSQL the instances run; they keep %s (set spec.image to choose)",
			in.image, obs.found.templateImage)
		in.image = obs.found.templateImage
	}
	switch {
	case in.major != db.Spec.Version:
		r.planMajorUpgrade(db, obs, &in)
	case in.image == in.failedImage && in.goodImage != "":
		in.image = in.goodImage
		obs.found.rolledBack = fmt.Sprintf("Image %s did not become ready; rolled back to %s", in.failedImage, in.goodImage)
	case in.goodImage != "" && obs.found.templateImage != in.goodImage && obs.found.templateImage == in.image:
		if why := r.failing(obs); why != "" {
			in.failedImage, in.image = obs.found.templateImage, in.goodImage
			obs.found.rolledBack = fmt.Sprintf("Image %s did not become ready; rolled back to %s", in.failedImage, in.goodImage)
			controller.CountRollback("Database", db)
			controller.Event(ctx, r.Recorder, db, live, corev1.EventTypeWarning, v1alpha1.ReasonRolledBack, "Rollback",
				"Image %s: %s; rolling back to %s", in.failedImage, why, in.goodImage)
		}
	}
	return in
}

// failing says why an instance on the StatefulSet's current image cannot
// become ready, or "" while it still may.
func (r *Reconciler) failing(obs *observation) string {
	for i := range obs.Pods {
		pod := &obs.Pods[i]
		if containerImage(&pod.Spec) != obs.found.templateImage || podReady(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && failFast[w.Reason] {
				return fmt.Sprintf("pod %s is %s", pod.Name, w.Reason)
			}
		}
		if age := obs.now.Sub(pod.CreationTimestamp.Time); age > r.UpgradeDeadline {
			return fmt.Sprintf("pod %s was not ready within %s", pod.Name, r.UpgradeDeadline)
		}
	}
	return ""
}

// rolloutComplete is true when every instance runs the StatefulSet's
// current revision and is ready.
func rolloutComplete(sts *appsv1.StatefulSet, pods []corev1.Pod) bool {
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" ||
		len(pods) != int(ptrValue(sts.Spec.Replicas)) {
		return false
	}
	for i := range pods {
		if pods[i].Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision || !podReady(&pods[i]) {
			return false
		}
	}
	return true
}

// rollOut restarts, one at a time, the instances that run an older revision
// of the StatefulSet (a new image or a changed restart-only setting):
// broken ones first, then replicas from the highest ordinal, the primary
// last, each only once every instance is ready again.
func (r *Reconciler) rollOut(ctx context.Context, db *v1alpha1.Database, obs *observation) (reconcile.Result, error) {
	sts := obs.sts
	if sts == nil || sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" {
		obs.found.pendingParams = pendingParameters(obs.plan, obs.found.in.runningParams, nil)
		return reconcile.Result{}, nil // the StatefulSet controller has not caught up; its status update wakes us
	}
	var outdated []*corev1.Pod
	allReady := len(obs.Pods) == int(ptrValue(sts.Spec.Replicas))
	for i := range obs.Pods {
		pod := &obs.Pods[i]
		allReady = allReady && podReady(pod) && pod.DeletionTimestamp.IsZero()
		if pod.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision && pod.DeletionTimestamp.IsZero() {
			outdated = append(outdated, pod)
		}
	}
	obs.found.outdated = len(outdated)
	obs.found.pendingParams = pendingParameters(obs.plan, obs.found.in.runningParams, outdated)
	if obs.HandedOver {
		return reconcile.Result{RequeueAfter: time.Second}, nil // readiness and roles just changed
	}
	// Also with nothing outdated: a replica promoted while it ran its old
	// primary's higher values runs them as the primary until it restarts
	// (its manager reports them pending a restart), and every replica
	// started under it would inherit them.
	if res, acted, err := r.lowerOnPrimaryFirst(ctx, db, obs); acted || err != nil {
		return res, err
	}
	if len(outdated) == 0 {
		return r.pollWhileRollingOut(obs), nil
	}
	// An instance still bootstrapping (a restore replaying WAL for hours)
	// is not broken: restarting it would start the restore over. A pod
	// whose restore init container runs says so itself, answer or not.
	candidates := slices.DeleteFunc(slices.Clone(outdated), func(p *corev1.Pod) bool {
		return obs.Instances[p.Name].Phase == instanceapi.PhaseBootstrapping || restoring(p)
	})
	if len(candidates) == 0 {
		return r.pollWhileRollingOut(obs), nil
	}
	wantHash := wantParametersHash(obs.plan)
	if moved, err := r.adoptInPlace(ctx, obs, candidates, sts.Status.UpdateRevision, wantHash); err != nil {
		return reconcile.Result{}, err
	} else if moved {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the cache lags the relabelled pods
	}
	victim := pickRestart(candidates, allReady, obs.Primary, r.Clock.Now())
	if victim == nil {
		return r.pollWhileRollingOut(obs), nil
	}
	if victim.Name == obs.Primary && podReady(victim) {
		// A planned restart of a working primary keeps to the maintenance
		// windows; a broken one is restarted at once.
		if wait, why := maintenanceHold(db, sts.Status.UpdateRevision, r.Clock.Now()); why != "" {
			obs.found.rolloutWaiting = why
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	if victim.Name == obs.Primary && podReady(victim) && len(obs.Pods) > 1 {
		// A planned restart of the primary is a switchover first: the old
		// primary then restarts as a replica, on a later pass.
		return r.switchoverBeforeRestart(ctx, db, obs, sts.Status.UpdateRevision)
	}
	if wait := stillRouted(db.Status.LastSwitchover, victim.Name, r.Clock.Now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if res, acted := r.restartVictimInPlace(ctx, db, obs, victim, sts.Status.UpdateRevision, wantHash); acted {
		return res, nil
	}
	uid := victim.UID
	if err := r.Client.Delete(ctx, victim, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("failed to delete pod %s: %w", victim.Name, err)
	}
	role := "replica"
	if victim.Name == obs.Primary {
		role = "primary"
	}
	if since, ready := readySince(victim); !ready && r.Clock.Now().Sub(since) >= brokenAfter {
		controller.CountRemediation("Database", db, "restart-broken-instance")
	}
	controller.Event(ctx, r.Recorder, db, victim, corev1.EventTypeNormal, "Restarting", "Restart",
		"Restarting %s %s to apply revision %s", role, victim.Name, sts.Status.UpdateRevision)
	return reconcile.Result{}, nil
}

// routeGrace is how long an old primary's pod outlives its switchover
// before a rollout restarts it. -rw moves to the new primary only once the
// EndpointSlice controller and then every node's kube-proxy have applied
// the role labels, and kube-proxy applies changes at most once a second
// (its default minSyncPeriod). Until then new connections still reach the
// old pod, whose instance manager forwards them to the new primary; a pod
// restarted sooner refused them, and the bench saw writes stop for 1.6 s
// after a switchover that took 0.15 s. The status keeps the promotion time
// to the second, so the hold is 2 to 3 s.
const routeGrace = 3 * time.Second

// stillRouted is how much longer a rollout must leave pod running because
// the last switchover moved the primary away from it a moment ago.
func stillRouted(last *v1alpha1.SwitchoverRecord, pod string, now time.Time) time.Duration {
	if last == nil || last.From != pod || last.Result != v1alpha1.SwitchoverSucceeded || last.PromotedTime == nil {
		return 0
	}
	return max(0, last.PromotedTime.Add(routeGrace).Sub(now))
}

// brokenAfter is how long an outdated instance must have been not ready
// before it restarts out of turn. One that is only briefly not ready (its
// replicas' streaming blips while the primary restarts in place, say)
// waits its turn: restarting it at once took two replicas of a
// synchronous Database down together, and writes with them.
const brokenAfter = 30 * time.Second

// pickRestart chooses the next instance to restart: an outdated one that
// has not been ready for brokenAfter serves nothing, so it goes at once;
// otherwise one at a time, replicas (highest ordinal first) before the
// primary, which hands over to a replica before its restart (see
// switchoverBeforeRestart).
func pickRestart(outdated []*corev1.Pod, allReady bool, primary string, now time.Time) *corev1.Pod {
	for _, p := range outdated {
		if since, ready := readySince(p); !ready && now.Sub(since) >= brokenAfter {
			return p
		}
	}
	if !allReady {
		return nil
	}
	best := outdated[0]
	for _, p := range outdated[1:] {
		if best.Name == primary || (p.Name != primary && ha.Ordinal(p.Name) > ha.Ordinal(best.Name)) {
			best = p
		}
	}
	return best
}

// lowerOnPrimaryFirst restarts the primary in place before any replica
// when the spec lowers a setting a replica may not run lower than its
// primary (postgres.StandbySensitive): a replica restarted first would
// refuse to start. It waits until the primary has read the new settings
// (PostgreSQL reports them pending a restart); the lease and the primary's
// readiness stay, so writes pause only for the restart itself. A change
// that also alters another restart-only setting is held, and the condition
// says so: the primary would be the first to try it, and replicas below a
// raised value could not be promoted until their own restart. It reports
// whether it acted or holds, so that nothing else restarts meanwhile.
func (r *Reconciler) lowerOnPrimaryFirst(ctx context.Context, db *v1alpha1.Database, obs *observation) (reconcile.Result, bool, error) {
	primary, ok := obs.Instances[obs.Primary]
	if len(obs.Pods) < 2 || !ok || primary.Role != instanceapi.RolePrimary || primary.InRecovery {
		return reconcile.Result{}, false, nil
	}
	lowered := postgres.Lowered(primary.StandbySettings, obs.plan.params)
	if len(lowered) == 0 {
		return reconcile.Result{}, false, nil
	}
	what := strings.Join(lowered, ", ")
	if others := slices.DeleteFunc(slices.Clone(obs.found.pendingParams), func(n string) bool { return slices.Contains(lowered, n) }); len(others) > 0 {
		obs.found.rolloutWaiting = fmt.Sprintf("Held: spec lowers %s, which the primary must restart with first, and changes %s, "+
			"which replicas must try first; change them in two steps", what, strings.Join(others, ", "))
		return reconcile.Result{}, true, nil
	}
	if primary.Phase != instanceapi.PhaseRunning {
		obs.found.rolloutWaiting = fmt.Sprintf("Lowering %s: the primary %s restarts first, once it runs", what, obs.Primary)
		return reconcile.Result{RequeueAfter: time.Second}, true, nil
	}
	if r.restartAsked(obs, obs.Primary) {
		obs.found.rolloutWaiting = fmt.Sprintf("Lowering %s: the primary %s restarts in place first", what, obs.Primary)
		return reconcile.Result{RequeueAfter: time.Second}, true, nil
	}
	for _, name := range lowered {
		if !slices.Contains(primary.PendingRestartSettings, name) {
			obs.found.rolloutWaiting = fmt.Sprintf("Lowering %s: waiting for the primary %s to read the new settings before it restarts, first", what, obs.Primary)
			return reconcile.Result{RequeueAfter: 2 * time.Second}, true, nil
		}
	}
	if err := r.restartPostgres(ctx, db, obs, obs.Primary); err != nil {
		return reconcile.Result{}, true, err
	}
	obs.found.rolloutWaiting = fmt.Sprintf("Lowering %s: the primary %s restarts in place first", what, obs.Primary)
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "Restarting", "Restart",
		"Restarting the primary %s in place first: the spec lowers %s, which a replica may not run lower than its primary", obs.Primary, what)
	return reconcile.Result{RequeueAfter: time.Second}, true, nil
}

// switchoverBeforeRestart moves the primary to the best streaming replica
// before the old primary restarts for revision. It waits, and says why,
// while no replica streams close enough: restarting the primary then would
// be a failover to a replica that lacks acknowledged writes.
func (r *Reconciler) switchoverBeforeRestart(ctx context.Context, db *v1alpha1.Database, obs *observation, revision string) (reconcile.Result, error) {
	return r.actor().AutoSwitchover(ctx, db, &obs.View, obs.InstanceStatuses,
		fmt.Sprintf("before restarting the primary %s to apply revision %s", obs.Primary, revision))
}

func (r *Reconciler) pollWhileRollingOut(obs *observation) reconcile.Result {
	if obs.found.in.goodImage != "" && obs.found.templateImage != obs.found.in.goodImage {
		return reconcile.Result{RequeueAfter: rolloutPoll}
	}
	return reconcile.Result{}
}

// pendingParameters names the restart-only settings whose values differ
// between what the instances last all ran (or outdated pods started with)
// and what the spec asks for.
func pendingParameters(p plan, running string, outdated []*corev1.Pod) []string {
	want := postgres.RestartOnly(p.params)
	var names []string
	if running != "" {
		had := map[string]string{}
		if json.Unmarshal([]byte(running), &had) == nil {
			names = append(names, postgres.ChangedKeys(had, want)...)
		}
	}
	for _, pod := range outdated {
		had := map[string]string{}
		if err := json.Unmarshal([]byte(pod.Annotations[annRestartParameters]), &had); err != nil {
			continue
		}
		names = append(names, postgres.ChangedKeys(had, want)...)
	}
	return uniqueSorted(names)
}

func containerImage(spec *corev1.PodSpec) string {
	for _, c := range spec.Containers {
		if c.Name == containerPostgres {
			return c.Image
		}
	}
	return ""
}

func podReady(pod *corev1.Pod) bool {
	_, ready := readySince(pod)
	return ready
}

// readySince says whether pod is ready, and since when it has been ready
// or not (its creation when the kubelet has not said yet).
func readySince(pod *corev1.Pod) (time.Time, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time, c.Status == corev1.ConditionTrue
		}
	}
	return pod.CreationTimestamp.Time, false
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// reportedPending names the settings PostgreSQL itself says wait for a
// restart (pg_settings.pending_restart), which also catches ALTER SYSTEM.
func reportedPending(obs *observation) []string {
	var names []string
	for _, s := range obs.InstanceStatuses {
		names = append(names, s.PendingRestart...)
	}
	return names
}

// olderThanRunning says whether image's release is of a lower minor than
// the images the instances run (the template's, the last good one) or
// than one an instance reports running.
func olderThanRunning(image, template, good string, running []v1alpha1.InstanceStatus) bool {
	pinned := postgres.MinorOf(image)
	if pinned < 0 {
		return false
	}
	major := postgres.ImageMajor(image)
	for _, other := range []string{template, good} {
		if other != "" && postgres.ImageMajor(other) == major && postgres.MinorOf(other) > pinned {
			return true
		}
	}
	for _, s := range running {
		if postgres.MajorOf(s.PostgresVersion) == major && postgres.MinorOf(s.PostgresVersion) > pinned {
			return true
		}
	}
	return false
}
