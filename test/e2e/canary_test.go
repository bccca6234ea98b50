//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strings"
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
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// demoWebImageCrash is demo-web set to exit 10 s after it starts.
const demoWebImageCrash = "localhost/daytwo-demo-web:crash-after-10s"

// One canary WebApp of 3 pods on the real node: a good image goes through
// both steps and is promoted; an image that crashes after 10 s is aborted
// at step 1 with the stable pods never touched; a ConfigMap change that
// breaks the app breaks one canary pod and is aborted the same way.
func TestWebAppCanary(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 150)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-config"}, Data: map[string]string{"GREETING": "hello from daytwo"}}
	if err := cluster.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	app := demoApp(ns, "shop", 3)
	app.Spec.Env = nil
	app.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shop-config"}}}}
	app.Spec.Rollout = &v1alpha1.WebAppRollout{Strategy: v1alpha1.RolloutCanary, Canary: &v1alpha1.WebAppCanary{
		Steps: []v1alpha1.WebAppCanaryStep{
			{Replicas: ptr.To[int32](1), AnalysisSeconds: ptr.To[int32](30)},
			{Weight: ptr.To[int32](50), AnalysisSeconds: ptr.To[int32](5), WaitForPromotion: true},
		},
		// The operator asks each canary pod itself, over the pod network;
		// the crash below may cost a request or two, which the restart
		// signal must report rather than the check.
		HTTPCheck: &v1alpha1.WebAppHTTPCheck{Path: "/healthz", IntervalSeconds: 2, SuccessPercent: 50, MinRequests: 3},
	}}
	if err := cluster.Client.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitApp(t, app, 2*time.Minute, "Ready with 3 pods", readyWith(3, demoWebImage))

	// A good image: step 1 runs one canary pod beside the 3 stable ones
	// (a quarter of the pods behind the Service), step 2 two and waits for
	// kubectl daytwo canary promote; then the stable pods roll to it and
	// the canary goes.
	start := time.Now()
	updateApp(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = demoWebImageV2 })
	waitApp(t, app, 2*time.Minute, "at step 1 with a quarter of the pods", func(a *v1alpha1.WebApp) bool {
		c := a.Status.Canary
		return c != nil && c.Step == 1 && c.CanaryImage == demoWebImageV2 && c.StableImage == demoWebImage && c.CanaryWeight == 25
	})
	atStep1 := runningPods(t, app)
	waitApp(t, app, 2*time.Minute, "waiting for promotion at step 2", func(a *v1alpha1.WebApp) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionProgressing)
		return a.Status.Canary != nil && a.Status.Canary.Step == 2 && c != nil && c.Reason == v1alpha1.ReasonCanaryWaiting
	})
	out := plugin(t, ns, "canary", "promote", "shop")
	if !strings.Contains(out, "Requested to promote the canary of shop (image "+demoWebImageV2+", step 2 of 2)") {
		t.Errorf("kubectl daytwo canary promote said %q", out)
	}
	// A pipeline's wait: exit code 0 once the revision runs everywhere.
	if out, code := pluginExit(t, ns, "canary", "status", "shop", "--watch", "--timeout", "3m"); code != 0 {
		t.Errorf("kubectl daytwo canary status --watch after the promotion: exit code %d\n%s", code, out)
	}
	waitApp(t, app, 3*time.Minute, "promoted", readyWith(3, demoWebImageV2))
	t.Logf("canary of a good image: both steps and the promotion in %s", time.Since(start).Round(time.Second))
	canaryGone(t, app)
	if len(atStep1) != 4 {
		t.Errorf("%d pods ran at step 1, want 3 stable and 1 canary", len(atStep1))
	}

	// A crashing image: aborted at step 1; the stable pods are the same
	// pods with the same restart counts.
	before := stablePods(t, app, 3)
	start = time.Now()
	updateApp(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = demoWebImageCrash })
	// The pipeline's wait fails with exit code 1 when the canary aborts.
	if out, code := pluginExit(t, ns, "canary", "status", "shop", "--watch", "--timeout", "3m"); code != 1 {
		t.Errorf("kubectl daytwo canary status --watch of a crashing canary: exit code %d, want 1\n%s", code, out)
	}
	aborted := waitAborted(t, app, "CRASH_AFTER=10s")
	t.Logf("canary of a crashing image aborted %s after the change: %s", time.Since(start).Round(time.Second), aborted)
	if !strings.Contains(aborted, "exit code 1") {
		t.Errorf("abort message %q lacks the exit code", aborted)
	}
	stableUntouched(t, app, before)
	abortEvent(t, app, demoWebImageCrash)
	// The stable Deployment deleted after the abort is made again with the
	// good image, from the record the WebApp owns, not the crashing one.
	gone := &appsv1.Deployment{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: app.Name}, gone); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "the stable Deployment made again", func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{}
		err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(gone), d)
		if err != nil || d.UID == gone.UID {
			return false, client.IgnoreNotFound(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != demoWebImageV2 {
			return false, fmt.Errorf("the Deployment made again runs %s, want %s", img, demoWebImageV2)
		}
		return true, nil
	})

	// Back to the stable image: nothing to roll.
	updateApp(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = demoWebImageV2 })
	waitApp(t, app, time.Minute, "complete on v2 again", readyWith(3, demoWebImageV2))

	// A bad ConfigMap change: one canary pod reads it and crashes; the
	// stable pods, started before it, keep theirs.
	before = stablePods(t, app, 3)
	cm.Data["CRASH_AFTER"] = "3s"
	if err := cluster.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	aborted = waitAborted(t, app, "CRASH_AFTER=3s")
	t.Logf("canary of a bad ConfigMap aborted: %s", aborted)
	stableUntouched(t, app, before)
}

// podState is each running pod's restart count, by UID.
func podState(t *testing.T, app *v1alpha1.WebApp) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, p := range runningPods(t, app) {
		out[string(p.UID)] = p.Status.ContainerStatuses[0].RestartCount
	}
	return out
}

// stablePods waits until n pods run, a gone canary's pods having gone
// too (garbage collection removes them a moment after their Deployment),
// and returns their state.
func stablePods(t *testing.T, app *v1alpha1.WebApp, n int) map[string]int32 {
	t.Helper()
	framework.Eventually(t, time.Minute, fmt.Sprintf("%d pods running", n), func(context.Context) (bool, error) {
		return len(podState(t, app)) == n, nil
	})
	return podState(t, app)
}

func stableUntouched(t *testing.T, app *v1alpha1.WebApp, before map[string]int32) {
	t.Helper()
	framework.Eventually(t, time.Minute, "only the stable pods running", func(context.Context) (bool, error) {
		return len(podState(t, app)) == len(before), nil
	})
	after := podState(t, app)
	for uid, restarts := range before {
		if got, ok := after[uid]; !ok || got != restarts {
			t.Errorf("stable pod %s: running %v with %d restarts, want running with %d", uid, ok, got, restarts)
		}
	}
}

// waitAborted waits for the canary's abort and returns its message, which
// must quote the container's last words.
func waitAborted(t *testing.T, app *v1alpha1.WebApp, words string) string {
	t.Helper()
	waitApp(t, app, 3*time.Minute, "canary aborted", func(a *v1alpha1.WebApp) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonCanaryAborted
	})
	c := meta.FindStatusCondition(app.Status.Conditions, v1alpha1.ConditionProgressing)
	if !strings.Contains(c.Message, words) || app.Status.Canary == nil || !strings.HasPrefix(app.Status.Canary.Message, "Restarts:") {
		t.Errorf("Progressing %q and status.canary %+v should quote the restart and %q", c.Message, app.Status.Canary, words)
	}
	if d := meta.FindStatusCondition(app.Status.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Reason != v1alpha1.ReasonCanaryAborted {
		t.Errorf("Degraded = %+v, want CanaryAborted", d)
	}
	canaryGone(t, app)
	return c.Message
}

func canaryGone(t *testing.T, app *v1alpha1.WebApp) {
	t.Helper()
	framework.Eventually(t, time.Minute, "canary Deployment deleted", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: app.Name + "-canary"}, &appsv1.Deployment{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

func abortEvent(t *testing.T, app *v1alpha1.WebApp, image string) {
	t.Helper()
	events := &corev1.EventList{}
	if err := cluster.Client.List(context.Background(), events, client.InNamespace(app.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == v1alpha1.ReasonCanaryAborted && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, image) {
			return
		}
	}
	t.Errorf("no CanaryAborted Warning event naming %s", image)
}

// watchedUntil is the end of a canary step's window in its message.
var watchedUntil = regexp.MustCompile(`watching \d+ canary pods until (\S+)$`)

// startCanaryOn creates a 2-pod canary WebApp "front" on Database db and
// changes its image, returning once its one canary pod is watched at step
// 1 (a 60 s window, so the switchover begins well within it), with the
// end of that window and every pod's state, once the window is 2 s old.
func startCanaryOn(t *testing.T, ns, db string) (app *v1alpha1.WebApp, windowEnd string, pods map[string]int32) {
	t.Helper()
	app = demoApp(ns, "front", 2)
	app.Spec.DatabaseRef = &v1alpha1.WebAppDatabaseRef{Name: db}
	app.Spec.Rollout = &v1alpha1.WebAppRollout{Strategy: v1alpha1.RolloutCanary, Canary: &v1alpha1.WebAppCanary{
		Steps: []v1alpha1.WebAppCanaryStep{{Replicas: ptr.To[int32](1), AnalysisSeconds: ptr.To[int32](60)}},
	}}
	if err := cluster.Client.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	waitApp(t, app, 2*time.Minute, "Ready with 2 pods", readyWith(2, demoWebImage))
	updateApp(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = demoWebImageV2 })
	waitApp(t, app, 2*time.Minute, "watching its canary pod at step 1", func(a *v1alpha1.WebApp) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionProgressing)
		return a.Status.Canary != nil && a.Status.Canary.Step == 1 && c != nil &&
			c.Reason == v1alpha1.ReasonCanaryProgressing && watchedUntil.MatchString(c.Message)
	})
	m := watchedUntil.FindStringSubmatch(meta.FindStatusCondition(app.Status.Conditions, v1alpha1.ConditionProgressing).Message)
	// The window's times have whole seconds: a pause that begins and
	// ends within the second it started (a switchover of 0.3 s, seen in
	// CI) would restart it at the same time to the second, and a restart
	// could not be told from none. So the window is 2 s old first.
	end, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatalf("window end %q: %v", m[1], err)
	}
	time.Sleep(time.Until(end.Add(-58 * time.Second)))
	return app, m[1], stablePods(t, app, 3)
}

// checkCanaryHeld checks, once the Database moved its primary to target,
// that the canary started by startCanaryOn paused meanwhile (seen by a
// watch of its statuses), kept the same pods, started its window again
// and then finished.
func checkCanaryHeld(t *testing.T, app *v1alpha1.WebApp, seen func() []v1alpha1.WebAppStatus, windowEnd string, pods map[string]int32, target string) {
	t.Helper()
	if now := podState(t, app); !maps.Equal(now, pods) {
		t.Errorf("pods (UID: restarts) %v before the switchover, %v after it: a held canary keeps its pods and the stable ones", pods, now)
	}
	waitApp(t, app, 2*time.Minute, "promoted after the switchover", readyWith(2, demoWebImageV2))
	held, restarted := "", ""
	var reasons []string
	for _, s := range seen() {
		c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionProgressing)
		if c == nil {
			continue
		}
		reasons = append(reasons, c.Reason)
		switch m := watchedUntil.FindStringSubmatch(c.Message); {
		case held == "" && c.Reason == v1alpha1.ReasonCanaryPromoting:
			t.Fatalf("the canary was promoted before any status showed it paused: %v", reasons)
		case held == "" && c.Reason == v1alpha1.ReasonDatabaseUnavailable:
			held = c.Message
		case held != "" && restarted == "" && m != nil:
			restarted = m[1]
		}
	}
	t.Logf("the canary during the switchover: %q; its window, until %s before, until %s after", held, windowEnd, restarted)
	if !strings.Contains(held, "Paused at step 1 of 1: Database shop is moving its primary to "+target) {
		t.Errorf("no status of %s said the canary paused for the switchover to %s; Progressing reasons seen: %v", app.Name, target, reasons)
	}
	// RFC 3339 times in UTC with whole seconds compare as strings.
	if restarted <= windowEnd {
		t.Errorf("the step's window ends at %q after the pause, %q before it: it should start again", restarted, windowEnd)
	}
}
