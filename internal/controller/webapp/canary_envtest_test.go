package webapp_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// canaryApp is a WebApp of 4 replicas rolled out by canary steps: one pod
// watched for a second, then half of them with no window.
func canaryApp(ns, name string) *v1alpha1.WebApp {
	app := newApp(ns, name)
	app.Spec.Replicas = ptr.To[int32](4)
	app.Spec.Rollout = &v1alpha1.WebAppRollout{Strategy: v1alpha1.RolloutCanary, Canary: &v1alpha1.WebAppCanary{
		Steps: []v1alpha1.WebAppCanaryStep{
			{Replicas: ptr.To[int32](1), AnalysisSeconds: ptr.To[int32](1)},
			{Weight: ptr.To[int32](50), AnalysisSeconds: ptr.To[int32](0)},
		}}}
	return app
}

// startCanary creates app with image demo:1, plays its Deployment becoming
// available, changes the image to demo:2 and returns the stable and canary
// Deployments once the canary runs its first step.
func startCanary(t *testing.T, app *v1alpha1.WebApp) (*appsv1.Deployment, *appsv1.Deployment) {
	t.Helper()
	create(t, app)
	stable := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	markAvailable(t, stable)
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonRolloutComplete)
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:2" })
	canary := canaryOf(t, app, "with one pod of demo:2", func(d *appsv1.Deployment) bool {
		return appContainer(d).Image == "demo:2" && ptr.Deref(d.Spec.Replicas, 0) == 1
	})
	return stable, canary
}

func canaryOf(t *testing.T, app *v1alpha1.WebApp, what string, cond func(*appsv1.Deployment) bool) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	eventually(t, "canary Deployment "+what, func() (bool, error) {
		if err := env.Client.Get(ctx, key(app.Namespace, app.Name+"-canary"), d); err != nil {
			return false, err
		}
		return cond(d), nil
	})
	return d
}

// canaryPod plays the ReplicaSet controller and the kubelet, which envtest
// does not run: a pod of the canary's template, ready or with status set
// by mutate.
func canaryPod(t *testing.T, canary *appsv1.Deployment, name string, mutate func(*corev1.PodStatus)) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: canary.Namespace, Name: name, Labels: canary.Spec.Template.Labels,
			Annotations: canary.Spec.Template.Annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: appContainer(canary).Image}}},
	}
	create(t, pod)
	pod.Status = corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}}}
	if mutate != nil {
		mutate(&pod.Status)
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatalf("update pod status: %v", err)
	}
}

func canaryGone(t *testing.T, app *v1alpha1.WebApp) {
	t.Helper()
	eventually(t, "canary Deployment deleted", func() (bool, error) {
		err := env.Client.Get(ctx, key(app.Namespace, app.Name+"-canary"), &appsv1.Deployment{})
		return apierrors.IsNotFound(err), nil
	})
}

func TestCanaryStepsThenPromotes(t *testing.T) {
	ns := env.Namespace(t)
	app := canaryApp(ns, "shop")
	_, canary := startCanary(t, app)

	// The canary's pods carry the Service's selector and their own track.
	if l := canary.Spec.Template.Labels; l["daytwo.dev/webapp"] != "shop" || l["daytwo.dev/track"] != "canary" {
		t.Errorf("canary pod labels = %v, want the WebApp's selector and the canary track", l)
	}
	if s := canary.Spec.Selector.MatchLabels; s["daytwo.dev/track"] != "canary" {
		t.Errorf("canary selector = %v, want the canary track", s)
	}
	stable := deploymentOf(t, app, "read", func(*appsv1.Deployment) bool { return true })
	if appContainer(stable).Image != "demo:1" || ptr.Deref(stable.Spec.Replicas, 0) != 4 {
		t.Errorf("stable Deployment = %s x%d during the canary, want demo:1 x4 untouched", appContainer(stable).Image, ptr.Deref(stable.Spec.Replicas, 0))
	}
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonCanaryProgressing)
	if c := app.Status.Canary; c == nil || c.Step != 1 || c.Steps != 2 || c.CanaryImage != "demo:2" || c.StableImage != "demo:1" ||
		c.CanaryReplicas != 1 || c.StableReplicas != 4 {
		t.Errorf("status.canary = %+v, want step 1 of 2, demo:2 x1 beside demo:1 x4", c)
	}

	// Its pod ready: after the step's window, half of the replicas.
	canaryPod(t, canary, "shop-canary-1", nil)
	canary = canaryOf(t, app, "at step 2 with 2 pods", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 2 })
	eventually(t, "the canary's weight", func() (bool, error) {
		if err := env.Client.Get(ctx, key(ns, "shop"), app); err != nil {
			return false, err
		}
		c := app.Status.Canary
		return c != nil && c.Step == 2 && c.CanaryReplicas == 2, nil
	})

	// Step 2 has no window: once its pods are ready, the stable pods take
	// the canary's template.
	canaryPod(t, canary, "shop-canary-2", nil)
	stable = deploymentOf(t, app, "promoted to demo:2", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:2" })
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonCanaryPromoting)
	if err := env.Client.Get(ctx, key(ns, "shop-canary"), &appsv1.Deployment{}); err != nil {
		t.Errorf("the canary went before the stable pods rolled: %v", err)
	}
	markAvailable(t, stable)
	canaryGone(t, app)
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonRolloutComplete)
	if app.Status.Canary != nil || app.Status.CurrentImage != "demo:2" {
		t.Errorf("status canary = %+v currentImage = %s, want no canary and demo:2", app.Status.Canary, app.Status.CurrentImage)
	}
}

func TestCanaryAbortsOnARestartAndHoldsTheRevision(t *testing.T) {
	ns := env.Namespace(t)
	app := canaryApp(ns, "api")
	app.Spec.Rollout.Canary.Steps[0].AnalysisSeconds = ptr.To[int32](3600)
	_, canary := startCanary(t, app)
	stable := deploymentOf(t, app, "read", func(*appsv1.Deployment) bool { return true })
	stableHash := stable.Spec.Template.Annotations["daytwo.dev/template-hash"]

	// A pod of the canary's template restarts.
	canaryPod(t, canary, "api-canary-x", func(st *corev1.PodStatus) {
		st.ContainerStatuses[0].RestartCount = 1
		st.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error",
			Message: "connecting to the payment service\nfatal: PAYMENT_URL is not set"}
	})

	canaryGone(t, app)
	c := condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonCanaryAborted)
	for _, want := range []string{"Canary of image demo:2 aborted; the stable pods keep demo:1", "exit code 2 (Error)", "fatal: PAYMENT_URL is not set"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Progressing message %q lacks %q", c.Message, want)
		}
	}
	condition(t, app, v1alpha1.ConditionDegraded, v1alpha1.ReasonCanaryAborted)
	if s := app.Status.Canary; s == nil || !strings.HasPrefix(s.Message, "Restarts: container app of canary pod api-canary-x exited") {
		t.Errorf("status.canary = %+v, want the restart signal", s)
	}
	stable = deploymentOf(t, app, "read", func(*appsv1.Deployment) bool { return true })
	if h := stable.Spec.Template.Annotations["daytwo.dev/template-hash"]; appContainer(stable).Image != "demo:1" || h != stableHash ||
		ptr.Deref(stable.Spec.Replicas, 0) != 4 {
		t.Errorf("stable Deployment = %s x%d template %s, want demo:1 x4 with template %s untouched",
			appContainer(stable).Image, ptr.Deref(stable.Spec.Replicas, 0), h, stableHash)
	}

	// Not tried again while the spec stays; a new image is.
	touch(t, app, "again")
	if err := env.Client.Get(ctx, key(ns, "api-canary"), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the aborted revision was tried again: %v", err)
	}
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:3" })
	canaryOf(t, app, "with demo:3", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:3" })
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonCanaryProgressing)
}

func TestCanaryPromoteAndAbortRequests(t *testing.T) {
	ns := env.Namespace(t)
	app := canaryApp(ns, "web")
	app.Spec.Rollout.Canary.Steps[0].AnalysisSeconds = ptr.To[int32](3600)
	startCanary(t, app)

	// A request that is not a time is ignored, and the status says so.
	update(t, app, func(a *v1alpha1.WebApp) {
		a.Annotations = map[string]string{v1alpha1.AnnotationPromoteRequested: "now please"}
	})
	eventually(t, "the unreadable request reported", func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), app)
		c := meta.FindStatusCondition(app.Status.Conditions, v1alpha1.ConditionProgressing)
		return err == nil && c != nil && strings.Contains(c.Message, `annotation daytwo.dev/promote-requested="now please" is not an RFC 3339 time`), err
	})
	if d := deploymentOf(t, app, "read", func(*appsv1.Deployment) bool { return true }); appContainer(d).Image != "demo:1" {
		t.Fatalf("an unreadable promote request promoted the canary")
	}

	// A request older than the canary is for an earlier one.
	old := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	settle(t, "an old promote request", func() {
		update(t, app, func(a *v1alpha1.WebApp) { a.Annotations = map[string]string{v1alpha1.AnnotationPromoteRequested: old} })
	})
	if d := deploymentOf(t, app, "read", func(*appsv1.Deployment) bool { return true }); appContainer(d).Image != "demo:1" {
		t.Fatalf("a promote request older than the canary promoted it")
	}
	now := time.Now().UTC().Format(time.RFC3339)
	update(t, app, func(a *v1alpha1.WebApp) { a.Annotations[v1alpha1.AnnotationPromoteRequested] = now })
	deploymentOf(t, app, "promoted on request", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:2" })

	// The next canary is aborted on request; the promote request stays,
	// and is older than it (the annotations' times are whole seconds: the
	// canary starts a second after it).
	time.Sleep(time.Second)
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:3" })
	canaryOf(t, app, "with demo:3", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:3" })
	time.Sleep(time.Second) // a whole second after the canary's start
	later := time.Now().UTC().Format(time.RFC3339)
	update(t, app, func(a *v1alpha1.WebApp) { a.Annotations[v1alpha1.AnnotationAbortRequested] = later })
	canaryGone(t, app)
	c := condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonCanaryAborted)
	if !strings.Contains(c.Message, "Aborted on request") {
		t.Errorf("message = %q, want the request named", c.Message)
	}
}

func TestRolloutPausesWhileTheDatabaseIsUnavailable(t *testing.T) {
	ns := env.Namespace(t)
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders", Finalizers: []string{"test.daytwo.dev/hold"}},
		Spec: v1alpha1.DatabaseSpec{Version: "17"}}
	create(t, db)
	app := newApp(ns, "shop")
	app.Spec.DatabaseRef = &v1alpha1.WebAppDatabaseRef{Name: "orders"}
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	markAvailable(t, d)

	// envtest runs no instances: a Database that never served holds
	// nothing, and the rollout goes on.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:2" })
	d = deploymentOf(t, app, "with demo:2", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:2" })
	markAvailable(t, d)

	// A Database being deleted (held by the test's finalizer) is one that
	// served and is not Ready now.
	if err := env.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Database deleting", func() (bool, error) {
		err := env.Client.Get(ctx, key(ns, "orders"), db)
		return err == nil && db.Status.Phase == v1alpha1.DatabasePhaseDeleting, err
	})
	// The API shows the phase a moment before the operator's cache does;
	// an image change read against the older Database starts rolling out
	// (and is then paused where it stands, not kept at demo:2).
	eventually(t, "the operator's cache holding the phase", func() (bool, error) {
		cached := &v1alpha1.Database{}
		err := env.Cache.Get(ctx, key(ns, "orders"), cached)
		return err == nil && cached.Status.Phase == v1alpha1.DatabasePhaseDeleting, err
	})
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:3" })
	c := condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonDatabaseUnavailable)
	if c.Message != "Rollout of image demo:3 paused: Database orders is not Ready" {
		t.Errorf("message = %q", c.Message)
	}
	d = deploymentOf(t, app, "paused", func(d *appsv1.Deployment) bool { return d.Spec.Paused })
	if appContainer(d).Image != "demo:2" {
		t.Errorf("image = %s while the Database is unavailable, want demo:2 kept", appContainer(d).Image)
	}

	// Without the reference the rollout goes on.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.DatabaseRef = nil })
	deploymentOf(t, app, "resumed with demo:3", func(d *appsv1.Deployment) bool { return !d.Spec.Paused && appContainer(d).Image == "demo:3" })
	update(t, db, func(db *v1alpha1.Database) { db.Finalizers = nil })
}

// The HTTP check asks each ready canary pod; a local server stands in for
// the pod (its IP 127.0.0.1 and the WebApp's port), answering 500.
func TestCanaryAbortsOnAFailingHTTPCheck(t *testing.T) {
	// The server's goroutines count; the test reads once the canary is gone.
	var asked, ok atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := asked.Add(1); r.URL.Path == "/ready" && n <= 2 {
			ok.Add(1)
			return
		}
		http.Error(w, "payment backend unreachable", http.StatusInternalServerError)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)

	ns := env.Namespace(t)
	app := canaryApp(ns, "checked")
	app.Spec.Port = int32(p)
	app.Spec.Rollout.Canary.Steps[0].AnalysisSeconds = ptr.To[int32](3600)
	app.Spec.Rollout.Canary.HTTPCheck = &v1alpha1.WebAppHTTPCheck{Path: "/ready", IntervalSeconds: 1, SuccessPercent: 90, MinRequests: 4}
	_, canary := startCanary(t, app)
	canaryPod(t, canary, "checked-canary-1", func(st *corev1.PodStatus) { st.PodIP = "127.0.0.1" })

	canaryGone(t, app)
	c := condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonCanaryAborted)
	want := "HTTPCheck: 2 of 4 requests to GET /ready on the canary pods succeeded (50%, below 90%); last failure: pod checked-canary-1: answered 500 Internal Server Error"
	if !strings.Contains(c.Message, want) {
		t.Errorf("message = %q, want it to contain %q", c.Message, want)
	}
	if ok.Load() != 2 {
		t.Errorf("the check was answered %d times with success, want 2", ok.Load())
	}
}
