package webapp

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// A canary runs as a second Deployment, <app>-canary, whose pods carry the
// WebApp's selector labels plus labelTrack: the Service sends them their
// share of connections, and the stable Deployment (whose ReplicaSets
// select by pod-template-hash and own their pods) never counts them. The
// canary Deployment records where the canary stands in its annotations.
const (
	labelTrack  = "daytwo.dev/track"
	trackCanary = "canary"

	annotationCanaryStep     = "daytwo.dev/canary-step"
	annotationCanaryStarted  = "daytwo.dev/canary-started"
	annotationCanarySince    = "daytwo.dev/canary-step-since"
	annotationCanaryTotal    = "daytwo.dev/canary-total"
	annotationCanaryBaseline = "daytwo.dev/canary-restart-baseline"
	annotationCanaryStepAt   = "daytwo.dev/canary-step-started"
	annotationCanarySteps    = "daytwo.dev/canary-steps"
	annotationCanaryIgnored  = "daytwo.dev/canary-ignored-requests"
	// annotationCanaryAborted on the stable Deployment is the signal that
	// aborted the canary of annotationFailedTemplate's revision.
	annotationCanaryAborted = "daytwo.dev/canary-aborted"
)

func canaryName(app *v1alpha1.WebApp) string { return canaryKey(client.ObjectKeyFromObject(app)).Name }

// canaryKey is the canary Deployment's key for the WebApp key.
func canaryKey(app client.ObjectKey) client.ObjectKey {
	return client.ObjectKey{Namespace: app.Namespace, Name: app.Name + "-canary"}
}

// canaryReport is what runCanary or settleCanary saw and did, for the
// status and for applyDeployment.
type canaryReport struct {
	reason, message string
	step, steps     int32
	canaryImage     string
	canaryReplicas  int32
	canaryAvailable int32
	// promote: the stable pods take the canary's revision now.
	promote bool
	// aborted: the canary goes (once the failure is recorded) and its
	// revision is held back.
	aborted bool
	requeue time.Duration
}

// runCanary runs the canary of template desired beside the stable
// Deployment live, and decides whether it moves on, holds, is promoted or
// aborted. An aborted canary's Deployment stays until the failure is
// recorded on the stable Deployment (settleCanary deletes it then), so an
// abort is never lost between the two writes.
func (r *Reconciler) runCanary(ctx context.Context, app *v1alpha1.WebApp, in podInputs, live *appsv1.Deployment,
	desired *corev1ac.PodTemplateSpecApplyConfiguration, now time.Time) (canaryReport, error) {
	hash := desired.Annotations[annotationTemplateHash]
	cd := controller.Named[appsv1.Deployment](app.Namespace, canaryName(app))
	own, conflict, err := controller.CheckOwner(ctx, r.Client, r.APIReader, app, "WebApp", cd, "Deployment")
	if err != nil {
		return canaryReport{}, err
	}
	steps := canarySteps(app)
	rep := canaryReport{steps: int32(len(steps)), canaryImage: app.Spec.Image}
	if own == controller.Conflicting || own == controller.Adoptable {
		rep.reason, rep.requeue = v1alpha1.ReasonConflictingResource, conflictRetry
		rep.message = "The canary cannot start: " + cmp.Or(conflict, "Deployment "+cd.Name+" exists and is not managed by daytwo; daytwo adopts no canary")
		return rep, nil
	}
	exists := own == controller.Owned
	// The step and its start are read from the canary Deployment: one the
	// cache holds from before this controller's last apply would take a
	// step again and restart its window.
	cdKey := client.ObjectKeyFromObject(cd)
	if r.cacheBehind(cdKey, cd, exists, now) {
		return canaryReport{}, errCacheBehind
	}
	current := exists && templateHash(cd) == hash
	in2 := canaryInput{steps: steps, hold: in.databaseHold, now: now, deadline: time.Duration(progressDeadline(app)) * time.Second,
		state: canaryState{started: now.Truncate(time.Second), total: ptr.Deref(desiredReplicas(app), ptr.Deref(live.Spec.Replicas, 1)), steps: hashOf(steps)}}
	in2.promoteRequested, in2.abortRequested = requestTime(app, v1alpha1.AnnotationPromoteRequested), requestTime(app, v1alpha1.AnnotationAbortRequested)
	if current {
		in2.state = stateOf(cd, in2.state)
		if in2.signal, in2.problem, in2.available, in2.restarts, err = r.canarySignals(ctx, app, cd, hash, in2.state); err != nil {
			return canaryReport{}, err
		}
	} else if exists && in.databaseHold != "" {
		// A canary of an earlier revision stays as it is until the hold
		// ends; the new revision's does not start meanwhile.
		rep.reason, rep.message = v1alpha1.ReasonDatabaseUnavailable, "Paused before the canary starts: "+in.databaseHold
		rep.canaryReplicas, rep.canaryImage = ptr.Deref(cd.Spec.Replicas, 0), templateImage(cd)
		return rep, nil
	}
	d := decideCanary(in2)
	rep.reason, rep.message, rep.requeue = d.reason, d.message, d.requeue
	if bad := unreadableRequests(app, d.state.ignored); bad != "" {
		rep.message = strings.TrimSpace(rep.message + " " + bad)
		// A value that is no time is told each look, as before; a time
		// the canary ignores, once, when first seen.
		unparseable, newlyIgnored := unreadableRequests(app, nil) != "", len(d.state.ignored) > len(in2.state.ignored)
		if unparseable || newlyIgnored {
			controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeWarning, "InvalidAnnotation", "ReadRequest", "%s", bad)
		}
	}
	rep.step, rep.canaryReplicas, rep.canaryAvailable = int32(d.state.step)+1, d.replicas, in2.available
	switch d.action {
	case canaryAbort:
		rep.aborted = true
		return rep, nil
	case canaryPromote:
		rep.promote, rep.step = true, rep.steps+1
		rep.canaryReplicas = ptr.Deref(cd.Spec.Replicas, 0)
		return rep, nil
	case canaryHold:
		if !exists {
			rep.canaryReplicas = 0
			return rep, nil
		}
		d.replicas = ptr.Deref(cd.Spec.Replicas, d.replicas)
		rep.canaryReplicas = d.replicas
	}
	if !current {
		controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeNormal, v1alpha1.ReasonCanaryProgressing, "StartCanary",
			"Canary of image %s started: %d steps, %d pods first", app.Spec.Image, len(steps), d.replicas)
	} else if d.state.step != in2.state.step {
		controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeNormal, v1alpha1.ReasonCanaryProgressing, "CanaryStep",
			"Canary of image %s at step %d of %d: %d pods", app.Spec.Image, d.state.step+1, len(steps), d.replicas)
	}
	ac := canaryDeployment(app, in.selector, desired, d.replicas, d.state, d.action == canaryHold)
	if err := controller.ApplyIfChanged(ctx, r.Client, cd, ac, appsv1ac.ExtractDeployment, "canary Deployment"); err != nil {
		return rep, err
	}
	r.recordApplied(cdKey, ac, now)
	return rep, nil
}

// canarySignals reads the canary's pods (without the cache) and returns
// the first bad signal they show, or the HTTP check's, how many of them
// are ready, and their restarts. The pods are counted rather than the
// Deployment's status: the state annotations move the Deployment's
// generation, and its status would lag behind each step.
func (r *Reconciler) canarySignals(ctx context.Context, app *v1alpha1.WebApp, cd *appsv1.Deployment, hash string, st canaryState) (signal, problem string, available, restarts int32, err error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(app.Namespace), client.MatchingLabels(SelectorOf(cd))); err != nil {
		return "", "", 0, 0, fmt.Errorf("failed to list the canary's pods: %w", err)
	}
	key := client.ObjectKeyFromObject(app)
	was := sets.New[types.UID]()
	if v, ok := r.canaryReady.Load(key); ok {
		was = v.(sets.Set[types.UID])
	}
	var maxRestarts int32
	if c := canarySpec(app); c != nil {
		maxRestarts = c.MaxRestarts
	}
	signal, ready, restarts, problem := canarySignal(pods.Items, hash, st.restartBaseline, maxRestarts, was)
	r.canaryReady.Store(key, ready)
	switch {
	case signal != "":
	case deadlineExceeded(cd):
		signal = fmt.Sprintf("ProgressDeadlineExceeded: the canary's pods were not available within %d seconds", progressDeadline(app))
		if problem != "" {
			signal += "; " + problem
		}
	default:
		signal = r.httpCheck(ctx, app, pods.Items, hash, st)
	}
	return signal, problem, int32(ready.Len()), restarts, nil
}

// httpCheck sends the WebApp's HTTP check to each ready canary pod, once
// per interval while a step's window runs, and returns its verdict.
func (r *Reconciler) httpCheck(ctx context.Context, app *v1alpha1.WebApp, pods []corev1.Pod, hash string, st canaryState) string {
	c := canarySpec(app)
	if c == nil || c.HTTPCheck == nil || st.since.IsZero() {
		return ""
	}
	check := c.HTTPCheck
	key := client.ObjectKeyFromObject(app)
	step := fmt.Sprintf("%s/%d/%d", hash, st.step, st.since.Unix())
	t := httpTally{step: step}
	if v, ok := r.httpTallies.Load(key); ok && v.(httpTally).step == step {
		t = v.(httpTally)
	}
	if now := r.Clock.Now(); now.Sub(t.last) >= time.Duration(check.IntervalSeconds)*time.Second {
		t.last = now
		port := check.Port
		if port == 0 {
			port = app.Spec.Port
		}
		// In parallel, a few at a time: a hung endpoint holds this
		// reconcile for one timeout, not one per pod.
		var g errgroup.Group
		g.SetLimit(8)
		var mu sync.Mutex
		for i := range pods {
			p := &pods[i]
			if p.Annotations[annotationTemplateHash] != hash || !podReady(p) || p.Status.PodIP == "" {
				continue
			}
			g.Go(func() error {
				url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))) + check.Path
				err := r.probe(ctx, url)
				mu.Lock()
				defer mu.Unlock()
				t.total++
				if err != nil {
					t.lastFailed = fmt.Sprintf("pod %s: %v", p.Name, err)
					logf.FromContext(ctx).V(1).Info("Canary HTTP check failed", "pod", p.Name, "error", err.Error())
					return nil
				}
				t.ok++
				return nil
			})
		}
		_ = g.Wait() // the probes report through t, never an error
		r.httpTallies.Store(key, t)
	}
	return httpVerdict(t, check)
}

// probe sends one GET; a 2xx or 3xx answer within 2 seconds succeeds.
func (r *Reconciler) probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// No redirects: a 3xx is an answer, and the check stays on the pod.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// forgetCanary drops what the Reconciler remembers of app's canary.
func (r *Reconciler) forgetCanary(key client.ObjectKey) {
	r.canaryReady.Delete(key)
	r.httpTallies.Delete(key)
	// The canary Deployment goes: a later canary starts from none.
	r.applied.Delete(canaryKey(key))
}

// settleCanary removes a canary Deployment no longer needed: once the
// stable Deployment (live) has rolled to the promoted revision, at once
// when the WebApp left the Canary strategy or took another revision. While
// the stable pods roll, the canary's keep serving.
func (r *Reconciler) settleCanary(ctx context.Context, app *v1alpha1.WebApp, live *appsv1.Deployment, desiredHash string) (*canaryReport, error) {
	cd := controller.Named[appsv1.Deployment](app.Namespace, canaryName(app))
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(cd), cd); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	promoted := templateHash(cd) == desiredHash &&
		templateHash(live) == desiredHash
	if isCanary(app) && promoted && !rolledOut(live) {
		steps := int32(len(canarySteps(app)))
		return &canaryReport{reason: v1alpha1.ReasonCanaryPromoting, step: steps + 1, steps: steps, canaryImage: app.Spec.Image,
			canaryReplicas: ptr.Deref(cd.Spec.Replicas, 0), canaryAvailable: cd.Status.AvailableReplicas,
			message: "Promoting: the stable pods roll to the canary's revision", requeue: canaryPoll}, nil
	}
	r.forgetCanary(client.ObjectKeyFromObject(app))
	if promoted {
		controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeNormal, v1alpha1.ReasonRolloutComplete, "PromoteCanary",
			"Canary of image %s promoted: every pod runs it", app.Spec.Image)
	}
	return nil, controller.DeleteOwned(ctx, r.Client, app, cd, "Deployment")
}

// rolledOut reports whether every pod of d runs its current template.
func rolledOut(d *appsv1.Deployment) bool {
	n := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == n &&
		d.Status.Replicas == n && d.Status.AvailableReplicas == n
}

// stateOf reads the canary's state from its Deployment; what it lacks
// (a canary Deployment cut short) comes from fresh. Steps edited while the
// canary runs start again from the first (its pods stay): an index into
// the old steps means nothing in the new ones, and could skip a step that
// waits for promotion.
func stateOf(cd *appsv1.Deployment, fresh canaryState) canaryState {
	a := cd.Annotations
	st := fresh
	st.step, _ = strconv.Atoi(a[annotationCanaryStep])
	if t, err := time.Parse(time.RFC3339, a[annotationCanaryStarted]); err == nil {
		st.started = t
	}
	if t, err := time.Parse(time.RFC3339, a[annotationCanarySince]); err == nil {
		st.since = t
	}
	if n, err := strconv.ParseInt(a[annotationCanaryTotal], 10, 32); err == nil {
		st.total = int32(n)
	}
	if n, err := strconv.ParseInt(a[annotationCanaryBaseline], 10, 32); err == nil {
		st.restartBaseline = int32(n)
	}
	if t, err := time.Parse(time.RFC3339, a[annotationCanaryStepAt]); err == nil {
		st.stepStarted = t
	}
	for _, v := range strings.Split(a[annotationCanaryIgnored], ",") {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			st.ignored = append(st.ignored, t)
		}
	}
	// Steps changed under a running canary: it starts over.
	if a[annotationCanarySteps] != fresh.steps {
		st.step, st.since, st.stepStarted = 0, time.Time{}, time.Time{}
	}
	return st
}

// requestTime is the RFC 3339 time of app's annotation, or zero.
func requestTime(app *v1alpha1.WebApp, annotation string) time.Time {
	t, _ := time.Parse(time.RFC3339, app.Annotations[annotation])
	return t
}

// unreadableRequests says which of app's promote and abort annotations are
// set but are ignored, or "": not RFC 3339 times, or times the canary
// ignores (see canaryState.ignored).
func unreadableRequests(app *v1alpha1.WebApp, ignored []time.Time) string {
	var out []string
	for _, a := range []string{v1alpha1.AnnotationPromoteRequested, v1alpha1.AnnotationAbortRequested} {
		v, ok := app.Annotations[a]
		switch t := requestTime(app, a); {
		case ok && t.IsZero():
			out = append(out, fmt.Sprintf("annotation %s=%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z and is ignored", a, v))
		case slices.ContainsFunc(ignored, t.Equal):
			out = append(out, fmt.Sprintf("annotation %s=%q was more than a minute ahead of the operator's clock and is ignored by this canary (a time zone mistake?)", a, v))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "The " + strings.Join(out, "; the ") + "."
}

// canaryDeployment is the desired canary Deployment of app: template with
// the canary's track label, replicas pods, and st in its annotations.
// Paused while held, so a hold longer than the progress deadline does not
// leave the Deployment controller's ProgressDeadlineExceeded behind.
func canaryDeployment(app *v1alpha1.WebApp, sel map[string]string, template *corev1ac.PodTemplateSpecApplyConfiguration,
	replicas int32, st canaryState, paused bool) *appsv1ac.DeploymentApplyConfiguration {
	canarySel := map[string]string{labelTrack: trackCanary}
	maps.Copy(canarySel, sel)
	t := *template
	t.ObjectMetaApplyConfiguration = ptr.To(*template.ObjectMetaApplyConfiguration)
	t.Labels = nil
	t.WithLabels(template.Labels).WithLabels(canarySel)
	annotations := map[string]string{
		annotationCanaryStep:     strconv.Itoa(st.step),
		annotationCanaryStarted:  st.started.UTC().Format(time.RFC3339),
		annotationCanaryTotal:    strconv.Itoa(int(st.total)),
		annotationCanaryBaseline: strconv.Itoa(int(st.restartBaseline)),
		annotationCanarySteps:    st.steps,
	}
	if !st.since.IsZero() {
		annotations[annotationCanarySince] = st.since.UTC().Format(time.RFC3339)
	}
	if !st.stepStarted.IsZero() {
		annotations[annotationCanaryStepAt] = st.stepStarted.UTC().Format(time.RFC3339)
	}
	if len(st.ignored) > 0 {
		var ts []string
		for _, t := range st.ignored {
			ts = append(ts, t.UTC().Format(time.RFC3339))
		}
		annotations[annotationCanaryIgnored] = strings.Join(ts, ",")
	}
	spec := appsv1ac.DeploymentSpec().
		WithReplicas(replicas).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(canarySel)).
		WithRevisionHistoryLimit(2).
		WithProgressDeadlineSeconds(progressDeadline(app)).
		WithStrategy(rollingUpdate(app)).
		WithTemplate(&t)
	if paused {
		// Only when true: the extracted live object omits false, and an
		// apply that states it would never compare unchanged.
		spec.WithPaused(true)
	}
	return appsv1ac.Deployment(canaryName(app), app.Namespace).
		WithLabels(labels(app)).WithLabels(map[string]string{labelTrack: trackCanary}).
		WithAnnotations(annotations).
		WithOwnerReferences(ownerReference(app)).
		WithSpec(spec)
}

// databaseHold says why a rollout must wait for db, or "": while its
// primary moves (a failover or switchover), it upgrades or restarts its
// instances, or its primary is not ready. A Database still being created
// holds nothing: it has served no one yet, and its app's first rollouts
// (its credentials, say) must not wait for it.
func databaseHold(db *v1alpha1.Database) string {
	st := db.Status
	if st.Phase == "" || st.Phase == v1alpha1.DatabasePhaseCreating {
		return ""
	}
	ready := meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady)
	switch {
	case st.TargetPrimary != "":
		return fmt.Sprintf("Database %s is moving its primary to %s", db.Name, st.TargetPrimary)
	case st.Phase == v1alpha1.DatabasePhaseUpgrading:
		return fmt.Sprintf("Database %s is upgrading or restarting its instances", db.Name)
	case !ready:
		return fmt.Sprintf("Database %s is not Ready", db.Name)
	}
	return ""
}
