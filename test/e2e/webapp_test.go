//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

func demoApp(ns, name string, replicas int32) *v1alpha1.WebApp {
	return &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.WebAppSpec{
			Image: demoWebImage, ImagePullPolicy: corev1.PullNever, Port: 8080, Replicas: ptr.To(replicas),
			Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello from daytwo"}},
			// 20m, not the default 100m, for the parallel suites (see
			// leanResources).
			Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
		},
	}
}

func updateApp(t *testing.T, app *v1alpha1.WebApp, mutate func(*v1alpha1.WebApp)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(app), app); err != nil {
			return err
		}
		mutate(app)
		return cluster.Client.Update(context.Background(), app)
	})
	if err != nil {
		t.Fatalf("update WebApp %s: %v", app.Name, err)
	}
}

// waitApp waits until the WebApp's status for its current generation satisfies cond.
func waitApp(t *testing.T, app *v1alpha1.WebApp, timeout time.Duration, what string, cond func(*v1alpha1.WebApp) bool) {
	t.Helper()
	start := time.Now()
	framework.Eventually(t, timeout, "WebApp "+app.Name+" "+what, func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return false, err
		}
		return app.Status.ObservedGeneration == app.Generation && cond(app), nil
	})
	t.Logf("%s %s after %s", app.Name, what, time.Since(start).Round(10*time.Millisecond))
}

func readyWith(available int32, image string) func(*v1alpha1.WebApp) bool {
	return func(a *v1alpha1.WebApp) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady)
		p := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && c.Status == metav1.ConditionTrue && p != nil && p.Reason == v1alpha1.ReasonRolloutComplete &&
			a.Status.AvailableReplicas == available && a.Status.CurrentImage == image
	}
}

// runningPods lists the Running, not terminating pods of app.
func runningPods(t *testing.T, app *v1alpha1.WebApp) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cluster.Client.List(context.Background(), pods, client.InNamespace(app.Namespace), client.MatchingLabels{"daytwo.dev/webapp": app.Name}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// httpThroughService asks the app n times from another pod, through its
// Service's DNS name, and returns the distinct pod hostnames that answered.
func httpThroughService(t *testing.T, app *v1alpha1.WebApp, name string, n int) map[string]bool {
	t.Helper()
	out := cluster.RunToCompletion(t, e2eClient(app.Namespace, name, []string{"http", app.Status.URL + "/", fmt.Sprint(n)}), 2*time.Minute)
	hosts := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var body struct{ Greeting, Hostname string }
		if err := json.Unmarshal([]byte(line), &body); err != nil || body.Greeting != "hello from daytwo" {
			t.Fatalf("unexpected answer from %s: %q (%v)", app.Status.URL, line, err)
		}
		hosts[body.Hostname] = true
	}
	return hosts
}

// A WebApp becomes Ready with real pods that serve HTTP through its Service,
// scales, rolls out a new image, and rolls back one that can never start.
func TestWebAppLifecycleOnARealNode(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 150)
	app := demoApp(ns, "shop", 2)
	if err := cluster.Client.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	waitApp(t, app, 2*time.Minute, "Ready with 2 pods", readyWith(2, demoWebImage))
	waitEndpoints(t, ns, app.Name, 2)
	// kube-proxy programs new endpoints a moment after the EndpointSlice has
	// them (its minimum sync period is 1 s), so a first round may reach one pod.
	hosts := map[string]bool{}
	for round := 0; round < 5 && len(hosts) < 2; round++ {
		hosts = httpThroughService(t, app, fmt.Sprintf("http-1-%d", round), 20)
	}
	if len(hosts) != 2 {
		t.Errorf("5 rounds of 20 requests each reached %d pods (%v), want both", len(hosts), hosts)
	}

	for _, n := range []int32{1, 5, 2} {
		updateApp(t, app, func(a *v1alpha1.WebApp) { a.Spec.Replicas = ptr.To(n) })
		waitApp(t, app, 2*time.Minute, fmt.Sprintf("scaled to %d", n), readyWith(n, demoWebImage))
		framework.Eventually(t, time.Minute, fmt.Sprintf("%d running pods", n), func(context.Context) (bool, error) {
			return len(runningPods(t, app)) == int(n), nil
		})
	}

	updateApp(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = demoWebImageV2 })
	waitApp(t, app, 2*time.Minute, "rolled out v2", readyWith(2, demoWebImageV2))
	for _, p := range runningPods(t, app) {
		if p.Spec.Containers[0].Image != demoWebImageV2 {
			t.Errorf("pod %s runs %s after the rollout", p.Name, p.Spec.Containers[0].Image)
		}
	}

	// An image that is not on the node, with pull policy Never, can never
	// become available: daytwo rolls back once the deadline passes.
	const broken = "localhost/daytwo-demo-web:does-not-exist"
	updateApp(t, app, func(a *v1alpha1.WebApp) {
		a.Spec.Image = broken
		a.Spec.Rollout = &v1alpha1.WebAppRollout{ProgressDeadlineSeconds: 10}
	})
	waitApp(t, app, 3*time.Minute, "rolled back", func(a *v1alpha1.WebApp) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonRolledBack
	})
	c := meta.FindStatusCondition(app.Status.Conditions, v1alpha1.ConditionProgressing)
	if !strings.Contains(c.Message, broken) || !strings.Contains(c.Message, demoWebImageV2) {
		t.Errorf("Progressing message %q should name the bad and the restored image", c.Message)
	}
	waitApp(t, app, 2*time.Minute, "serving v2 again", func(a *v1alpha1.WebApp) bool {
		return a.Status.AvailableReplicas == 2 && meta.IsStatusConditionTrue(a.Status.Conditions, v1alpha1.ConditionReady)
	})
	if hosts := httpThroughService(t, app, "http-2", 10); len(hosts) == 0 {
		t.Error("no pod answered after the rollback")
	}
	events := &corev1.EventList{}
	if err := cluster.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events.Items {
		found = found || (e.Reason == v1alpha1.ReasonRolledBack && strings.Contains(e.Message, broken))
	}
	if !found {
		t.Error("no RolledBack event naming the bad image")
	}
}

// Pods roll when a ConfigMap they read changes.
func TestWebAppRollsOnConfigChange(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 60)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "greeting"}, Data: map[string]string{"GREETING": "hello from daytwo"}}
	if err := cluster.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	app := demoApp(ns, "cfg", 1)
	app.Spec.Env = nil
	app.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "greeting"}}}}
	if err := cluster.Client.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	waitApp(t, app, 2*time.Minute, "Ready", readyWith(1, demoWebImage))
	before := runningPods(t, app)[0].Name

	cm.Data["GREETING"] = "hello again"
	if err := cluster.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "a new pod with the new config", func(context.Context) (bool, error) {
		pods := runningPods(t, app)
		return len(pods) == 1 && pods[0].Name != before && podReady(pods[0]), nil
	})
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deletionPolicy Delete removes the app's pods; Orphan leaves them serving.
func TestWebAppDeletionPolicies(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 60)
	ctx := context.Background()
	gone, kept := demoApp(ns, "gone", 1), demoApp(ns, "kept", 1)
	kept.Spec.DeletionPolicy = v1alpha1.WebAppDeletionOrphan
	for _, a := range []*v1alpha1.WebApp{gone, kept} {
		if err := cluster.Client.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		waitApp(t, a, 2*time.Minute, "Ready", readyWith(1, demoWebImage))
		if err := cluster.Client.Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 2*time.Minute, "Deployment and pods of gone removed", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, &appsv1.Deployment{})
		return apierrors.IsNotFound(err) && len(runningPods(t, gone)) == 0, nil
	})
	framework.Eventually(t, time.Minute, "WebApp kept deleted", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKeyFromObject(kept), &v1alpha1.WebApp{})), nil
	})
	time.Sleep(3 * time.Second) // give garbage collection the chance to do the wrong thing
	d := &appsv1.Deployment{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, d); err != nil {
		t.Fatalf("orphaned Deployment: %v", err)
	}
	if len(d.OwnerReferences) != 0 || d.Status.AvailableReplicas != 1 || len(runningPods(t, kept)) != 1 {
		t.Errorf("orphaned Deployment owners=%v available=%d", d.OwnerReferences, d.Status.AvailableReplicas)
	}
}
