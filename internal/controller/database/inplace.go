package database

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Restart-only settings roll in place. A revision that changes nothing but
// annRestartParameters needs postgres restarted, not the pod replaced: the
// instance manager restarts postgres (POST /restart, about a quarter of a
// second from shutdown to accepting connections), and once it reports that
// postgres started with the new file the operator moves the pod to the new
// revision by relabelling it. The pod then matches the new template in
// everything (its annotation is set too), so the StatefulSet counts it
// updated and a later replacement makes the same pod. Nothing else changes:
// replicas first, the primary hands over first unless it is alone, and a
// lowered setting still restarts the primary first (lowerOnPrimaryFirst).
//
// An instance manager too old to report Status.StartConfigHash, an
// instance broken for brokenAfter, or a revision that changes more than
// settings falls back to replacing the pod. One that does not answer (for
// silentPatience at most), or revisions that cannot be read for now, are
// waited for.

// settingsOnlyChange compares the pod templates of ControllerRevisions from
// and to. What cannot be compared for good (a revision gone, a pod without
// a revision label, a revision without a template) answers "not settings
// only": the pod is then replaced, as before restarts in place. A read that
// failed (a timeout, the API server restarting) is an error, and the caller
// waits: replacing a pod on a blip could take one mid-restart.
func (r *Reconciler) settingsOnlyChange(ctx context.Context, ns, from, to string) (revisionChange, error) {
	if from == "" || to == "" {
		return revisionChange{}, nil
	}
	key := [3]string{ns, from, to}
	if v, ok := r.inPlace.known(key); ok {
		return v, nil
	}
	var revs [2]appsv1.ControllerRevision
	for i, name := range []string{from, to} {
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &revs[i]); err != nil {
			switch {
			case apierrors.IsNotFound(err):
				r.inPlace.remember(key, revisionChange{})
				return revisionChange{}, nil
			case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err):
				// Not for a moment (a missing RBAC rule, say): replaced, and said.
				logf.FromContext(ctx).Error(err, "Cannot read revisions; the pod is replaced instead of restarted in place", "revision", name)
				return revisionChange{}, nil
			}
			return revisionChange{}, fmt.Errorf("failed to read revision %s: %w", name, err) // not remembered: the next pass asks again
		}
	}
	v, err := compareRevisions(revs[0].Data.Raw, revs[1].Data.Raw)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Cannot compare revisions; the pod is replaced instead of restarted in place", "from", from, "to", to)
	}
	r.inPlace.remember(key, v)
	return v, nil
}

// compareRevisions compares two ControllerRevisions' data (the StatefulSet
// controller stores {"spec":{"template":...}}) without annRestartParameters.
func compareRevisions(a, b []byte) (revisionChange, error) {
	var ta, tb map[string]any
	if err := json.Unmarshal(a, &ta); err != nil {
		return revisionChange{}, err
	}
	if err := json.Unmarshal(b, &tb); err != nil {
		return revisionChange{}, err
	}
	var out revisionChange
	for _, t := range []map[string]any{ta, tb} {
		spec, _ := t["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		if tmpl == nil {
			return revisionChange{}, fmt.Errorf("no pod template in the revision")
		}
		meta, _ := tmpl["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		out.params, _ = ann[annRestartParameters].(string) // the newer one's stays
		delete(ann, annRestartParameters)
	}
	out.settingsOnly = reflect.DeepEqual(ta, tb)
	return out, nil
}

// inPlaceHealthy: every instance but victim runs and streams (a replica),
// so restarting victim takes nothing else down with it. A replica streams
// by its own word and by the primary's: a replica's manager notices a lost
// stream at its next look, up to a second late, while the primary's list
// starts empty with each run of its server, so a replica whose primary just
// restarted counts only once it is back.
func inPlaceHealthy(obs *observation, victim string) bool {
	primary, ok := obs.Instances[obs.Primary]
	if !ok || primary.Phase != instanceapi.PhaseRunning {
		return false
	}
	for i := range obs.Pods {
		name := obs.Pods[i].Name
		if name == victim || name == obs.Primary {
			continue
		}
		s, ok := obs.Instances[name]
		if ok && s.Phase == instanceapi.PhaseFenced {
			continue // fenced on request: it serves nothing to take down
		}
		if !ok || s.Phase != instanceapi.PhaseRunning || len(s.RaisedSettings) > 0 || !s.Streaming {
			return false
		}
		// The primary must see it stream too.
		if !slices.Contains(primary.Standbys, name) {
			return false
		}
	}
	return true
}

// inPlaceVerdict is what rollInPlace may do with one outdated pod.
type inPlaceVerdict int

const (
	// inPlaceNo: replace the pod (an instance manager too old to say
	// what it started with).
	inPlaceNo inPlaceVerdict = iota
	// inPlaceDone: postgres already started with the new settings; only
	// the pod's revision is to be moved.
	inPlaceDone
	// inPlaceRestart: its manager read the new settings; restart postgres.
	inPlaceRestart
	// inPlaceWait: the instance did not answer (for silentPatience at
	// most; a dead manager's pod turns not ready sooner, and brokenAfter
	// replaces it), the
	// new settings have not reached the pod yet, postgres is stopping or
	// starting (as asked, or demoted by a switchover), it runs the
	// primary's higher values for now, or a restart was asked a moment ago.
	inPlaceWait
)

// decideInPlace is the pure part of rollInPlace for one pod whose revision
// changes settings only. A pod broken for brokenAfter is not asked: it is
// replaced, as any broken instance.
func decideInPlace(s instanceapi.Status, known bool, wantHash string, askedRecently bool) inPlaceVerdict {
	switch {
	case !known:
		return inPlaceWait // a status call that timed out, mid-restart perhaps
	case s.StartConfigHash == "", s.Phase == instanceapi.PhaseFenced:
		// Fenced on request, postgres does not start: its pod is
		// replaced, and comes back fenced on the new revision.
		return inPlaceNo
	case len(s.RaisedSettings) > 0:
		return inPlaceWait // its manager restarts it once it replayed the primary's change
	case s.Phase == instanceapi.PhaseRunning && s.StartConfigHash == wantHash:
		return inPlaceDone
	case s.Phase != instanceapi.PhaseRunning, askedRecently, s.ConfigHash != wantHash:
		return inPlaceWait
	default:
		return inPlaceRestart
	}
}

// adoptInPlace moves every outdated pod whose postgres already started
// with the new settings to the update revision. It reports whether it
// moved one, or tried to and lost a race (the pod changed meanwhile).
func (r *Reconciler) adoptInPlace(ctx context.Context, obs *observation, outdated []*corev1.Pod, revision, wantHash string) (bool, error) {
	moved := false
	want := obs.plan.restartParameters()
	for _, pod := range outdated {
		change, err := r.settingsOnlyChange(ctx, pod.Namespace, pod.Labels[appsv1.ControllerRevisionHashLabelKey], revision)
		s, known := obs.Instances[pod.Name]
		// The revision must render the settings this pass rendered: obs.sts
		// was read before this pass applied the StatefulSet.
		if err != nil || !change.settingsOnly || change.params != want || decideInPlace(s, known, wantHash, false) != inPlaceDone {
			continue
		}
		// A copy: the observation stays what was observed.
		moving := pod.DeepCopy()
		moving.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
		if moving.Annotations == nil {
			moving.Annotations = map[string]string{}
		}
		moving.Annotations[annRestartParameters] = want
		// Optimistic: a pod replaced or changed since it was observed is
		// left for the next pass to judge again.
		err = r.Client.Patch(ctx, moving, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{}))
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return moved, fmt.Errorf("failed to move pod %s to revision %s: %w", pod.Name, revision, err)
		}
		moved = true
	}
	return moved, nil
}

// restartVictimInPlace restarts postgres in victim instead of replacing the
// pod when that applies. It reports whether it acted or waits.
func (r *Reconciler) restartVictimInPlace(ctx context.Context, db *v1alpha1.Database, obs *observation, victim *corev1.Pod, revision, wantHash string) (reconcile.Result, bool) {
	if since, ready := readySince(victim); !ready && r.Clock.Now().Sub(since) >= brokenAfter {
		return reconcile.Result{}, false // broken: replaced
	}
	role := "replica"
	if victim.Name == obs.Primary {
		role = "primary"
	}
	change, err := r.settingsOnlyChange(ctx, victim.Namespace, victim.Labels[appsv1.ControllerRevisionHashLabelKey], revision)
	switch {
	case err != nil:
		obs.found.rolloutWaiting = fmt.Sprintf("Restarting %s %s to apply revision %s: %v", role, victim.Name, revision, err)
		return reconcile.Result{RequeueAfter: 2 * time.Second}, true
	case !change.settingsOnly:
		return reconcile.Result{}, false
	case change.params != obs.plan.restartParameters():
		// obs.sts was read before this pass applied the StatefulSet: the
		// update revision is about to be a newer one.
		obs.found.rolloutWaiting = fmt.Sprintf("Restarting %s %s in place: waiting for the StatefulSet's revision %s to render the spec's settings",
			role, victim.Name, revision)
		return reconcile.Result{RequeueAfter: time.Second}, true
	}
	s, known := obs.Instances[victim.Name]
	if silent := r.inPlace.silentFor(victim.UID, known, r.Clock.Now()); silent >= silentPatience {
		logf.FromContext(ctx).Info("The instance manager has not answered; replacing the pod instead of restarting postgres in place",
			"pod", victim.Name, "silentFor", silent.Round(time.Second))
		return reconcile.Result{}, false
	}
	switch decideInPlace(s, known, wantHash, r.restartAsked(obs, victim.Name)) {
	case inPlaceNo:
		return reconcile.Result{}, false
	case inPlaceDone: // moved by adoptInPlace; the cache has not seen it yet
		return reconcile.Result{RequeueAfter: time.Second}, true
	case inPlaceWait:
		why := "waiting for it to read the new settings and start with them"
		if !known {
			why = "waiting for its instance manager to answer"
		}
		obs.found.rolloutWaiting = fmt.Sprintf("Restarting %s %s in place to apply revision %s: %s", role, victim.Name, revision, why)
		return reconcile.Result{RequeueAfter: time.Second}, true
	}
	if !inPlaceHealthy(obs, victim.Name) {
		obs.found.rolloutWaiting = fmt.Sprintf("Restarting %s %s in place to apply revision %s once every other instance runs and every replica streams",
			role, victim.Name, revision)
		return reconcile.Result{RequeueAfter: time.Second}, true
	}
	if err := r.restartPostgres(ctx, db, obs, victim.Name); err != nil {
		obs.found.rolloutWaiting = fmt.Sprintf("Restarting %s %s in place to apply revision %s: %v", role, victim.Name, revision, err)
		return reconcile.Result{RequeueAfter: 2 * time.Second}, true
	}
	obs.found.rolloutWaiting = fmt.Sprintf("Restarting %s %s in place to apply revision %s", role, victim.Name, revision)
	controller.Event(ctx, r.Recorder, db, victim, corev1.EventTypeNormal, "Restarting", "Restart",
		"Restarting %s %s in place to apply revision %s (restart-only settings)", role, victim.Name, revision)
	return reconcile.Result{RequeueAfter: time.Second}, true
}

// restartPostgres asks the named instance's manager to restart postgres in
// place, after a checkpoint on a primary so that the shutdown has little to
// write.
func (r *Reconciler) restartPostgres(ctx context.Context, db *v1alpha1.Database, obs *observation, name string) error {
	token, err := r.apiToken(ctx, db)
	if err != nil {
		return err
	}
	ip, err := r.targetOf(ctx, db, obs, name)
	if err != nil {
		return err
	}
	if name == obs.Primary {
		if err := r.Instances.Checkpoint(ctx, ip, token); err != nil {
			return fmt.Errorf("failed to checkpoint the primary %s before its restart: %w", name, err)
		}
	}
	// Remembered before it is asked: an answer lost to a timeout may hide
	// a restart the manager took.
	if pod := obs.PodNamed(name); pod != nil {
		r.inPlace.ask(pod.UID, r.Clock.Now())
	}
	if err := r.Instances.Restart(ctx, ip, token); err != nil {
		return fmt.Errorf("failed to restart postgres in %s in place: %w", name, err)
	}
	return nil
}

// restartAsked: a restart in place of the named instance was asked a
// moment ago; until it reports the new start it is not asked again.
func (r *Reconciler) restartAsked(obs *observation, name string) bool {
	pod := obs.PodNamed(name)
	return pod != nil && r.inPlace.askedRecently(pod.UID, r.Clock.Now())
}

// wantParametersHash is the ParametersHash of the file the spec renders.
func wantParametersHash(p plan) string {
	return instanceapi.ParametersHash([]byte(p.parametersConf()))
}
