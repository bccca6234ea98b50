package webapp_test

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// rootOverride is docs/webapp.md's override for an image that starts as root
// and binds port 80, as the official nginx does.
func rootOverride() *corev1.SecurityContext {
	return &corev1.SecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "SETUID", "SETGID", "NET_BIND_SERVICE"}}}
}

func labelNamespace(t *testing.T, name, level string) {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	update(t, ns, func(ns *corev1.Namespace) {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels["pod-security.kubernetes.io/enforce"] = level
	})
}

func TestSecurityOverrideIsCheckedAgainstTheNamespaceLevel(t *testing.T) {
	ns := env.Namespace(t)
	labelNamespace(t, ns, "restricted")

	// Root without runAsNonRoot: false contradicts the default: refused at admission, naming the field.
	bad := newApp(ns, "contradiction")
	bad.Spec.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}
	err := env.Client.Create(ctx, bad)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.securityContext.runAsUser") {
		t.Fatalf("create with runAsUser 0 alone = %v, want Invalid naming spec.securityContext.runAsUser", err)
	}

	// A restricted namespace: the override is refused before any pod is asked for.
	app := newApp(ns, "web")
	app.Spec.Port = 80
	app.Spec.SecurityContext = rootOverride()
	create(t, app)
	c := condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonPodSecurityViolation)
	for _, w := range []string{`"restricted:latest"`, "runAsNonRoot", "spec.securityContext"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("Ready message %q lacks %q", c.Message, w)
		}
	}
	if err := env.Client.Get(ctx, key(ns, "web"), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Deployment of a refused template: %v, want none", err)
	}

	// The namespace relaxed to baseline: the namespace watch applies it.
	labelNamespace(t, ns, "baseline")
	d := deploymentOf(t, app, "created once the namespace allows it", func(*appsv1.Deployment) bool { return true })
	sc := appContainer(d).SecurityContext
	if sc == nil || ptr.Deref(sc.RunAsNonRoot, true) || ptr.Deref(sc.RunAsUser, -1) != 0 || len(sc.Capabilities.Add) != 4 ||
		ptr.Deref(sc.AllowPrivilegeEscalation, true) || d.Spec.Template.Spec.SecurityContext.SeccompProfile == nil {
		t.Fatalf("container securityContext %+v, pod %+v: want the override over the kept defaults", sc, d.Spec.Template.Spec.SecurityContext)
	}
	markAvailable(t, d)
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonAvailable)

	// Restricted again, and a new image: what runs is kept, and the status says why the new one is not applied.
	labelNamespace(t, ns, "restricted")
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:2" })
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonPodSecurityViolation)
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonAvailable)
	if err := env.Client.Get(ctx, key(ns, "web"), d); err != nil || appContainer(d).Image != "demo:1" {
		t.Fatalf("Deployment image %q (%v), want demo:1 kept", appContainer(d).Image, err)
	}
}

// A rollout that makes no progress says why in the pods' own words.
func TestStuckRolloutSaysWhyFromThePods(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "rooted")
	app.Spec.Replicas = ptr.To[int32](2)
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	if p := appContainer(d).TerminationMessagePolicy; p != corev1.TerminationMessageFallbackToLogsOnError {
		t.Fatalf("terminationMessagePolicy %q, want FallbackToLogsOnError", p)
	}

	// The kubelet's refusal, on a pod of the Deployment, as a kubelet writes it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rooted-abc", Labels: d.Spec.Selector.MatchLabels},
		Spec:       d.Spec.Template.Spec,
	}
	create(t, pod)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "demo:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "CreateContainerConfigError", Message: `container has runAsNonRoot and image will run as root (pod: "rooted-abc_` + ns + `", container: app)`}}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The Deployment controller's view: nothing available, no progress for a minute.
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, UnavailableReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated",
			LastUpdateTime: metav1.NewTime(time.Now().Add(-time.Minute)), LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}}
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	c := condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonContainerConfigError)
	for _, w := range []string{"0 of 2 replicas available", "rooted-abc", "will run as root", "spec.securityContext.runAsNonRoot: false"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("Ready message %q lacks %q", c.Message, w)
		}
	}
	condition(t, app, v1alpha1.ConditionDegraded, v1alpha1.ReasonContainerConfigError)

	// Fixed: the condition goes with the fault.
	markAvailable(t, d)
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonAvailable)
	condition(t, app, v1alpha1.ConditionDegraded, v1alpha1.ReasonAvailable)
}
