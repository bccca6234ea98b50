//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// seedWebApp is the tutorial's WebApp as written: the official nginx image
// (hack/images.sh builds a stand-in that behaves like it), port 80.
const seedWebApp = `
apiVersion: daytwo.dev/v1alpha1
kind: WebApp
metadata:
  name: nginx
spec:
  image: nginx:1.25
  replicas: 3
  port: 80
`

func labelPodSecurity(t *testing.T, ns, level string) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"` + level + `"}}}`)
	if err := cluster.Client.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func condition(a *v1alpha1.WebApp, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(a.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// The seed's nginx WebApp: refused by the restricted default with a
// condition that says why and what to change, then run by the documented
// override, serving HTTP on port 80; and a namespace that enforces
// restricted keeps the override from being applied at all.
func TestSeedNginxWebApp(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 400)
	labelPodSecurity(t, ns, "baseline")
	cluster.ApplyYAML(t, ns, seedWebApp)
	app := &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nginx"}}
	waitApp(t, app, 2*time.Minute, "refused, saying why", func(a *v1alpha1.WebApp) bool {
		return condition(a, v1alpha1.ConditionReady).Reason == v1alpha1.ReasonContainerConfigError
	})
	ready := condition(app, v1alpha1.ConditionReady)
	t.Logf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	for _, w := range []string{"0 of 3 replicas available", "runAsNonRoot and image will run as root", "spec.securityContext.runAsNonRoot: false"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("Ready message lacks %q", w)
		}
	}
	if d := condition(app, v1alpha1.ConditionDegraded); d.Reason != v1alpha1.ReasonContainerConfigError {
		t.Errorf("Degraded = %+v, want reason %s", d, v1alpha1.ReasonContainerConfigError)
	}

	// An override that forgets CHOWN: nginx starts, cannot chown its temp
	// directories and exits; the condition quotes nginx's own words.
	updateApp(t, app, func(a *v1alpha1.WebApp) {
		a.Spec.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"SETUID", "SETGID", "NET_BIND_SERVICE"}}}
	})
	waitApp(t, app, 2*time.Minute, "crash-looping, in nginx's words", func(a *v1alpha1.WebApp) bool {
		return condition(a, v1alpha1.ConditionReady).Reason == v1alpha1.ReasonCrashLoopBackOff
	})
	ready = condition(app, v1alpha1.ConditionReady)
	t.Logf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	if !strings.Contains(ready.Message, "Operation not permitted") || !strings.Contains(ready.Message, "exit code 1") {
		t.Errorf("Ready message lacks nginx's permission error and its exit code")
	}

	// The documented override (config/samples/webapp-nginx.yaml).
	cluster.ApplyFile(t, ns, filepath.Join(framework.RepoRoot(), "config", "samples", "webapp-nginx.yaml"))
	waitApp(t, app, 3*time.Minute, "Ready with 3 nginx pods", readyWith(3, "nginx:1.25"))
	waitEndpoints(t, ns, app.Name, 3)
	out := cluster.RunToCompletion(t, e2eClient(ns, "http-nginx", []string{"http", app.Status.URL + "/", "3"}), 2*time.Minute)
	if n := strings.Count(out, "<h1>Welcome to nginx!</h1>"); n != 3 {
		t.Fatalf("3 GETs of %s: %d nginx welcome pages in %q", app.Status.URL, n, out)
	}
	for _, p := range runningPods(t, app) {
		sc := p.Spec.Containers[0].SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
			t.Errorf("pod %s lost a restricted default: %+v", p.Name, sc)
		}
	}

	// A namespace that enforces restricted: a template change is not
	// applied (the API server would refuse its pods), and what runs stays.
	labelPodSecurity(t, ns, "restricted")
	updateApp(t, app, func(a *v1alpha1.WebApp) {
		a.Spec.Env = append(a.Spec.Env, corev1.EnvVar{Name: "CHANGED", Value: "1"})
	})
	waitApp(t, app, time.Minute, "refusing the change", func(a *v1alpha1.WebApp) bool {
		return condition(a, v1alpha1.ConditionProgressing).Reason == v1alpha1.ReasonPodSecurityViolation
	})
	msg := condition(app, v1alpha1.ConditionProgressing).Message
	if !strings.Contains(msg, `"restricted:latest"`) || !strings.Contains(msg, "runAsNonRoot") {
		t.Errorf("Progressing message %q should name the level and the check", msg)
	}
	if r := condition(app, v1alpha1.ConditionReady); r.Status != metav1.ConditionTrue || app.Status.AvailableReplicas != 3 {
		t.Errorf("Ready %+v with %d available: the running pods should be untouched", r, app.Status.AvailableReplicas)
	}
	t.Logf("Progressing: %s", msg)
}
