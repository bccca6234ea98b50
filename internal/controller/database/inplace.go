package database

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
// An instance manager too old to report Status.StartConfigHash, one not
// running, or a revision that changes more than settings falls back to
// replacing the pod.

// restartAskedHold is how long an asked restart in place is not asked
// again while the instance does not yet report the new start.
const restartAskedHold = 15 * time.Second

// inPlaceState is the operator's memory of what it decided about revisions
// (immutable, so the answer holds) and of the restarts it asked for.
type inPlaceState struct {
	mu sync.Mutex
	// settingsOnly: revision pair (from, to) -> the templates differ only
	// in annRestartParameters.
	settingsOnly map[[2]string]bool
	// asked: pod UID -> when its restart in place was asked.
	asked map[types.UID]time.Time
}

// cachedRevisions bounds inPlaceState.settingsOnly; it starts over when full.
const cachedRevisions = 512

func (s *inPlaceState) known(from, to string) (bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.settingsOnly[[2]string{from, to}]
	return v, ok
}

func (s *inPlaceState) remember(from, to string, v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settingsOnly == nil || len(s.settingsOnly) >= cachedRevisions {
		s.settingsOnly = map[[2]string]bool{}
	}
	s.settingsOnly[[2]string{from, to}] = v
}

// askedRecently reports whether pod's restart was asked within hold, and
// forgets asks older than that.
func (s *inPlaceState) askedRecently(uid types.UID, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.asked {
		if now.Sub(at) >= restartAskedHold {
			delete(s.asked, k)
		}
	}
	_, ok := s.asked[uid]
	return ok
}

func (s *inPlaceState) ask(uid types.UID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asked == nil {
		s.asked = map[types.UID]time.Time{}
	}
	s.asked[uid] = now
}

// settingsOnlyChange reports whether the pod template of ControllerRevision
// from differs from to's only in restart-only settings. A revision that is
// gone (or was never a ControllerRevision) answers false.
func (r *Reconciler) settingsOnlyChange(ctx context.Context, ns, from, to string) (bool, error) {
	if v, ok := r.inPlace.known(from, to); ok {
		return v, nil
	}
	var revs [2]appsv1.ControllerRevision
	for i, name := range []string{from, to} {
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &revs[i]); apierrors.IsNotFound(err) {
			r.inPlace.remember(from, to, false)
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("failed to read revision %s: %w", name, err)
		}
	}
	v, err := templatesDifferInSettingsOnly(revs[0].Data.Raw, revs[1].Data.Raw)
	if err != nil {
		return false, fmt.Errorf("revisions %s and %s: %w", from, to, err)
	}
	r.inPlace.remember(from, to, v)
	return v, nil
}

// templatesDifferInSettingsOnly compares two ControllerRevisions' data (the
// StatefulSet controller stores {"spec":{"template":...}}) without
// annRestartParameters.
func templatesDifferInSettingsOnly(a, b []byte) (bool, error) {
	var ta, tb map[string]any
	if err := json.Unmarshal(a, &ta); err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, &tb); err != nil {
		return false, err
	}
	for _, t := range []map[string]any{ta, tb} {
		spec, _ := t["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		if tmpl == nil {
			return false, fmt.Errorf("no pod template in the revision")
		}
		meta, _ := tmpl["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		delete(ann, annRestartParameters)
	}
	return reflect.DeepEqual(ta, tb), nil
}

// inPlaceHealthy: every instance runs and every replica streams, so one
// may restart without taking a second one down with the first.
func inPlaceHealthy(obs *observation) bool {
	for i := range obs.pods {
		s, ok := obs.instances[obs.pods[i].Name]
		if !ok || s.Phase != instanceapi.PhaseRunning || (s.Role != instanceapi.RolePrimary && !s.Streaming) {
			return false
		}
	}
	return true
}

// inPlaceVerdict is what rollInPlace may do with one outdated pod.
type inPlaceVerdict int

const (
	// inPlaceNo: replace the pod (a revision that changes more, an
	// instance manager that cannot say what it started with).
	inPlaceNo inPlaceVerdict = iota
	// inPlaceDone: postgres already started with the new settings; only
	// the pod's revision is to be moved.
	inPlaceDone
	// inPlaceRestart: its manager read the new settings; restart postgres.
	inPlaceRestart
	// inPlaceWait: the new settings have not reached the pod yet, or a
	// restart was asked a moment ago.
	inPlaceWait
)

// decideInPlace is the pure part of rollInPlace for one pod whose revision
// changes settings only.
func decideInPlace(s instanceapi.Status, known bool, wantHash string, askedRecently bool) inPlaceVerdict {
	switch {
	case !known || s.StartConfigHash == "":
		return inPlaceNo
	case s.Phase == instanceapi.PhaseRunning && s.StartConfigHash == wantHash:
		return inPlaceDone
	case askedRecently:
		return inPlaceWait
	case s.Phase != instanceapi.PhaseRunning:
		return inPlaceNo
	case s.ConfigHash != wantHash:
		return inPlaceWait
	default:
		return inPlaceRestart
	}
}

// adoptInPlace moves every outdated pod whose postgres already started
// with the new settings to the update revision. It reports whether it
// moved one.
func (r *Reconciler) adoptInPlace(ctx context.Context, obs *observation, outdated []*corev1.Pod, revision, wantHash string) (bool, error) {
	moved := false
	for _, pod := range outdated {
		only, err := r.settingsOnlyChange(ctx, pod.Namespace, pod.Labels[appsv1.ControllerRevisionHashLabelKey], revision)
		if err != nil {
			return moved, err
		}
		s, known := obs.instances[pod.Name]
		if !only || decideInPlace(s, known, wantHash, false) != inPlaceDone {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"labels":      map[string]string{appsv1.ControllerRevisionHashLabelKey: revision},
			"annotations": map[string]string{annRestartParameters: obs.plan.restartParameters()},
		}})
		if err := r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			return moved, fmt.Errorf("failed to move pod %s to revision %s: %w", pod.Name, revision, err)
		}
		moved = true
	}
	return moved, nil
}

// restartVictimInPlace restarts postgres in victim instead of replacing the
// pod when that applies. It reports whether it acted or waits.
func (r *Reconciler) restartVictimInPlace(ctx context.Context, db *v1alpha1.Database, obs *observation, victim *corev1.Pod, revision, wantHash string) (reconcile.Result, bool, error) {
	only, err := r.settingsOnlyChange(ctx, victim.Namespace, victim.Labels[appsv1.ControllerRevisionHashLabelKey], revision)
	if err != nil || !only {
		return reconcile.Result{}, err != nil, err
	}
	s, known := obs.instances[victim.Name]
	switch decideInPlace(s, known, wantHash, r.restartAsked(obs, victim.Name)) {
	case inPlaceNo, inPlaceDone: // inPlaceDone was adopted already; the cache lags
		return reconcile.Result{}, false, nil
	case inPlaceWait:
		obs.rolloutWaiting = fmt.Sprintf("Restarting %s in place to apply revision %s: waiting for it to read the new settings, then to start with them", victim.Name, revision)
		return reconcile.Result{RequeueAfter: time.Second}, true, nil
	}
	if !inPlaceHealthy(obs) {
		obs.rolloutWaiting = fmt.Sprintf("Restarting %s in place to apply revision %s once every instance runs and every replica streams", victim.Name, revision)
		return reconcile.Result{RequeueAfter: time.Second}, true, nil
	}
	if err := r.restartPostgres(ctx, db, obs, victim.Name); err != nil {
		return reconcile.Result{}, true, err
	}
	role := "replica"
	if victim.Name == obs.primary {
		role = "primary"
	}
	obs.rolloutWaiting = fmt.Sprintf("Restarting %s %s in place to apply revision %s", role, victim.Name, revision)
	controller.Event(ctx, r.Recorder, db, victim, corev1.EventTypeNormal, "Restarting", "Restart",
		"Restarting %s %s in place to apply revision %s (restart-only settings)", role, victim.Name, revision)
	return reconcile.Result{RequeueAfter: time.Second}, true, nil
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
	if name == obs.primary {
		if err := r.Instances.Checkpoint(ctx, ip, token); err != nil {
			return fmt.Errorf("failed to checkpoint the primary %s before its restart: %w", name, err)
		}
	}
	if err := r.Instances.Restart(ctx, ip, token); err != nil {
		return fmt.Errorf("failed to restart postgres in %s in place: %w", name, err)
	}
	if pod := podNamed(obs, name); pod != nil {
		r.inPlace.ask(pod.UID, r.Clock.Now())
	}
	return nil
}

// restartAsked: a restart in place of the named instance was asked a
// moment ago; until it reports the new start it is not asked again.
func (r *Reconciler) restartAsked(obs *observation, name string) bool {
	pod := podNamed(obs, name)
	return pod != nil && r.inPlace.askedRecently(pod.UID, r.Clock.Now())
}

func podNamed(obs *observation, name string) *corev1.Pod {
	for i := range obs.pods {
		if obs.pods[i].Name == name {
			return &obs.pods[i]
		}
	}
	return nil
}

// wantParametersHash is the ParametersHash of the file the spec renders.
func wantParametersHash(p plan) string {
	return instanceapi.ParametersHash([]byte(p.parametersConf()))
}
