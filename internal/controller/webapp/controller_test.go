package webapp_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, operator.Options{}) }

var ctx = context.Background()

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}

func update[T client.Object](t *testing.T, obj T, mutate func(T)) {
	t.Helper()
	env.Update(t, obj, func() { mutate(obj) })
}

func newApp(ns, name string) *v1alpha1.WebApp {
	return &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.WebAppSpec{Image: "demo:1", Port: 8080, Replicas: ptr.To[int32](1)},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func key(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// deploymentOf waits for app's Deployment to satisfy cond and returns it.
func deploymentOf(t *testing.T, app *v1alpha1.WebApp, what string, cond func(*appsv1.Deployment) bool) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	eventually(t, "Deployment "+what, func() (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), d); err != nil {
			return false, err
		}
		return cond(d), nil
	})
	return d
}

// condition waits until app has condition typ with reason for its current generation.
func condition(t *testing.T, app *v1alpha1.WebApp, typ, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, fmt.Sprintf("%s reason %s", typ, reason), func() (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(app.Status.Conditions, typ)
		if c == nil || c.Reason != reason || app.Status.ObservedGeneration != app.Generation {
			return false, fmt.Errorf("conditions %+v", app.Status.Conditions)
		}
		got = *c
		return true, nil
	})
	return got
}

// waitMessage waits until app's condition typ carries msg.
func waitMessage(t *testing.T, app *v1alpha1.WebApp, typ, msg string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s message %q", typ, msg), func() (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return false, err
		}
		if c := meta.FindStatusCondition(app.Status.Conditions, typ); c != nil && c.Message == msg {
			return true, nil
		}
		return false, fmt.Errorf("conditions %+v", app.Status.Conditions)
	})
}

// markAvailable plays the Deployment controller, which envtest does not run:
// every replica of the current template is updated and available.
// A reconcile may write the Deployment meanwhile: the status is then
// written again on the newer object.
func markAvailable(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}},
		}
		return env.Client.Status().Update(ctx, d)
	})
	if err != nil {
		t.Fatalf("update Deployment status: %v", err)
	}
}

func appContainer(d *appsv1.Deployment) corev1.Container { return d.Spec.Template.Spec.Containers[0] }

func TestCreateMakesChildrenWithSafeDefaults(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "shop")
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })

	if ref := metav1.GetControllerOf(d); ref == nil || ref.UID != app.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("Deployment controller reference = %+v, want the WebApp", ref)
	}
	c := appContainer(d)
	if c.Image != "demo:1" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.LivenessProbe == nil || c.LivenessProbe.TCPSocket == nil {
		t.Errorf("container = %+v, want the image and HTTP readiness / TCP liveness probes", c)
	}
	sc := c.SecurityContext
	if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container securityContext = %+v, want no escalation and drop ALL", sc)
	}
	psc := d.Spec.Template.Spec.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot and RuntimeDefault seccomp", psc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resources = %+v, want default requests", c.Resources)
	}
	svc := &corev1.Service{}
	eventually(t, "Service", func() (bool, error) { return true, env.Client.Get(ctx, key(ns, "shop"), svc) })
	if svc.Spec.Ports[0].Port != 8080 || svc.Spec.Selector["daytwo.dev/webapp"] != "shop" {
		t.Errorf("Service spec = %+v", svc.Spec)
	}
	// bench-webapp's floors write webapp.Children: they must be what a
	// reconcile applies, or the floor measures smaller objects.
	wantD, wantS := webapp.Children(app)
	if got, want := d.Spec.Template.Annotations["daytwo.dev/template-hash"], wantD.Spec.Template.Annotations["daytwo.dev/template-hash"]; got != want {
		t.Errorf("Deployment template hash = %s, webapp.Children's %s", got, want)
	}
	if !maps.Equal(d.Labels, wantD.Labels) || !maps.Equal(svc.Labels, wantS.Labels) || !maps.Equal(svc.Spec.Selector, wantS.Spec.Selector) {
		t.Errorf("labels %v, %v and selector %v differ from webapp.Children's", d.Labels, svc.Labels, svc.Spec.Selector)
	}
	// Field for field: daytwo's part of each child is what Children renders.
	if got, err := appsv1ac.ExtractDeployment(d, controller.FieldOwner); err != nil || controller.Fingerprint(got) != controller.Fingerprint(wantD) {
		t.Errorf("daytwo's part of the Deployment differs from webapp.Children's (%v)", err)
	}
	if got, err := corev1ac.ExtractService(svc, controller.FieldOwner); err != nil || controller.Fingerprint(got) != controller.Fingerprint(wantS) {
		t.Errorf("daytwo's part of the Service differs from webapp.Children's (%v)", err)
	}
	// One replica: no PDB, which would block node drains.
	if err := env.Client.Get(ctx, key(ns, "shop"), &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("PDB for a single replica: err = %v, want NotFound", err)
	}

	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonReconciling)
	if app.Status.URL != "http://shop."+ns+".svc.cluster.local:8080" || app.Status.Selector != "daytwo.dev/track notin (canary),daytwo.dev/webapp=shop" {
		t.Errorf("status url=%q selector=%q", app.Status.URL, app.Status.Selector)
	}
	markAvailable(t, d)
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonAvailable)
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonRolloutComplete)
	if app.Status.AvailableReplicas != 1 || app.Status.CurrentImage != "demo:1" {
		t.Errorf("status available=%d currentImage=%q", app.Status.AvailableReplicas, app.Status.CurrentImage)
	}
}

func TestImageUpdateScaleAndPDB(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "api")
	create(t, app)
	deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })

	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:2" })
	deploymentOf(t, app, "with image demo:2", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:2" })
	condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonRollingOut)

	// kubectl scale goes through the scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
	if err := env.Client.SubResource("scale").Update(ctx, app, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scale: %v", err)
	}
	deploymentOf(t, app, "with 5 replicas", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 5 })
	pdb := &policyv1.PodDisruptionBudget{}
	eventually(t, "PDB", func() (bool, error) { return true, env.Client.Get(ctx, key(ns, "api"), pdb) })
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
	}
	// Back to one replica: the PDB goes.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Replicas = ptr.To[int32](1) })
	eventually(t, "PDB deleted", func() (bool, error) {
		return apierrors.IsNotFound(env.Client.Get(ctx, key(ns, "api"), &policyv1.PodDisruptionBudget{})), nil
	})
}

func TestDriftIsRepaired(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "drift")
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })

	svc := &corev1.Service{}
	eventually(t, "Service", func() (bool, error) { return true, env.Client.Get(ctx, key(ns, "drift"), svc) })
	if err := env.Client.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Service recreated", func() (bool, error) {
		fresh := &corev1.Service{}
		if err := env.Client.Get(ctx, key(ns, "drift"), fresh); err != nil {
			return false, nil
		}
		return fresh.UID != svc.UID, nil
	})

	// Someone edits the Deployment by hand.
	update(t, d, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "hand-edited:9"
		d.Spec.Replicas = ptr.To[int32](7)
	})
	deploymentOf(t, app, "restored", func(d *appsv1.Deployment) bool {
		return appContainer(d).Image == "demo:1" && ptr.Deref(d.Spec.Replicas, 0) == 1
	})
}

func TestAutoscalingLeavesReplicasToTheHPA(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "auto")
	app.Spec.Replicas = nil
	app.Spec.Autoscaling = &v1alpha1.WebAppAutoscaling{MinReplicas: 2, MaxReplicas: 6, TargetCPUUtilizationPercentage: 70}
	create(t, app)
	deploymentOf(t, app, "created with minReplicas", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 2 })
	h := &autoscalingv2.HorizontalPodAutoscaler{}
	eventually(t, "HPA", func() (bool, error) { return true, env.Client.Get(ctx, key(ns, "auto"), h) })
	if ptr.Deref(h.Spec.MinReplicas, 0) != 2 || h.Spec.MaxReplicas != 6 || *h.Spec.Metrics[0].Resource.Target.AverageUtilization != 70 ||
		h.Spec.ScaleTargetRef.Name != "auto" || h.Spec.ScaleTargetRef.Kind != "WebApp" || h.Spec.ScaleTargetRef.APIVersion != "daytwo.dev/v1alpha1" {
		t.Errorf("HPA spec = %+v", h.Spec)
	}
	eventually(t, "PDB (up to 6 replicas)", func() (bool, error) {
		return true, env.Client.Get(ctx, key(ns, "auto"), &policyv1.PodDisruptionBudget{})
	})
	// The HPA reads the WebApp's scale: seeded, and selecting the stable
	// pods only, never a canary's.
	scale := &autoscalingv1.Scale{}
	eventually(t, "the scale's selector", func() (bool, error) {
		err := env.Client.SubResource("scale").Get(ctx, app, scale)
		return err == nil && scale.Status.Selector != "", err
	})
	if scale.Spec.Replicas != 2 || scale.Status.Selector != "daytwo.dev/track notin (canary),daytwo.dev/webapp=auto" {
		t.Errorf("scale: replicas %d, selector %q", scale.Spec.Replicas, scale.Status.Selector)
	}

	// The HPA scales the WebApp (as it does, through the scale
	// subresource); the Deployment follows, within the bounds.
	hpaScales := func(n int32) {
		t.Helper()
		s := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: n}}
		if err := env.Client.SubResource("scale").Update(ctx, app, client.WithSubResourceBody(s)); err != nil {
			t.Fatal(err)
		}
	}
	hpaScales(4)
	deploymentOf(t, app, "scaled to 4", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 4 })
	// Any reconcile (here: an image change) keeps 4.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:3" })
	d := deploymentOf(t, app, "with demo:3", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:3" })
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 4 {
		t.Errorf("replicas = %d after a reconcile, want the HPA's 4", got)
	}
	hpaScales(9)
	deploymentOf(t, app, "held at maxReplicas 6", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 6 })

	// Turning autoscaling off removes the HPA.
	update(t, app, func(a *v1alpha1.WebApp) {
		a.Spec.Autoscaling = nil
		a.Spec.Replicas = ptr.To[int32](1)
	})
	eventually(t, "HPA deleted", func() (bool, error) {
		return apierrors.IsNotFound(env.Client.Get(ctx, key(ns, "auto"), &autoscalingv2.HorizontalPodAutoscaler{})), nil
	})
}

// An app whose HPA scaled its Deployment before (an operator from before
// the HPA targeted the WebApp) keeps its pods: the seed is what runs.
func TestAutoscalingKeepsTheRunningCount(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "busy")
	app.Spec.Replicas = ptr.To[int32](5)
	create(t, app)
	deploymentOf(t, app, "5 pods", func(d *appsv1.Deployment) bool { return ptr.Deref(d.Spec.Replicas, 0) == 5 })
	update(t, app, func(a *v1alpha1.WebApp) {
		a.Spec.Replicas = nil
		a.Spec.Autoscaling = &v1alpha1.WebAppAutoscaling{MinReplicas: 2, MaxReplicas: 8}
	})
	eventually(t, "the WebApp seeded with the running count", func() (bool, error) {
		err := env.Client.Get(ctx, key(ns, "busy"), app)
		return err == nil && app.Spec.Replicas != nil, err
	})
	if *app.Spec.Replicas != 5 {
		t.Fatalf("seeded %d, want the 5 running", *app.Spec.Replicas)
	}
	if d := deploymentOf(t, app, "read", func(*appsv1.Deployment) bool { return true }); ptr.Deref(d.Spec.Replicas, 0) != 5 {
		t.Errorf("the Deployment went to %d", ptr.Deref(d.Spec.Replicas, 0))
	}
}

func TestConfigChangeRollsThePods(t *testing.T) {
	ns := env.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"mode": "a"}}
	create(t, cm)
	app := newApp(ns, "cfg")
	app.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	create(t, app)
	hash := func(d *appsv1.Deployment) string { return d.Spec.Template.Annotations["daytwo.dev/config-hash"] }
	d := deploymentOf(t, app, "created", func(d *appsv1.Deployment) bool { return hash(d) != "" })
	first := hash(d)

	update(t, cm, func(cm *corev1.ConfigMap) { cm.Data["mode"] = "b" })
	d = deploymentOf(t, app, "with a new config hash", func(d *appsv1.Deployment) bool { return hash(d) != first })

	// A write that changes nothing moves no resourceVersion and rolls nothing,
	// however often the app is reconciled afterwards.
	second, rv := hash(d), cm.ResourceVersion
	update(t, cm, func(*corev1.ConfigMap) {})
	if cm.ResourceVersion != rv {
		t.Fatalf("the no-op ConfigMap write moved its resourceVersion from %s to %s", rv, cm.ResourceVersion)
	}
	touch(t, app, "1")
	d = deploymentOf(t, app, "read again", func(*appsv1.Deployment) bool { return true })
	if hash(d) != second {
		t.Errorf("the config hash changed from %s to %s without a ConfigMap change", second, hash(d))
	}
}

func TestMissingSecretIsACondition(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "needs-secret")
	app.Spec.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "api-token"}, Key: "token"}}}}
	create(t, app)
	c := condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonMissingReference)
	if c.Message != "Waiting for Secret api-token to exist" {
		t.Errorf("message = %q", c.Message)
	}
	if err := env.Client.Get(ctx, key(ns, "needs-secret"), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment created before its Secret exists: %v", err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-token"}, StringData: map[string]string{"token": "x"}})
	deploymentOf(t, app, "created once the Secret exists", func(*appsv1.Deployment) bool { return true })
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonReconciling)
}

func foreignDeployment(ns, name string) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "legacy", Image: "legacy:1"}}}},
		},
	}
}

func TestExistingDeploymentIsAdoptedOnlyWhenAsked(t *testing.T) {
	ns := env.Namespace(t)
	create(t, foreignDeployment(ns, "legacy"))
	app := newApp(ns, "legacy")
	create(t, app)
	c := condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonConflictingResource)
	if c.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %s, want False", c.Status)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, key(ns, "legacy"), d); err != nil || appContainer(d).Image != "legacy:1" || len(d.OwnerReferences) != 0 {
		t.Fatalf("the foreign Deployment was touched: %v %+v", err, d.OwnerReferences)
	}

	update(t, app, func(a *v1alpha1.WebApp) { a.Annotations = map[string]string{v1alpha1.AnnotationAdopt: "true"} })
	// Adopted: daytwo controls it now, keeps its immutable selector (so its
	// pods keep running) and applies the WebApp's template.
	d = deploymentOf(t, app, "adopted", func(d *appsv1.Deployment) bool {
		ref := metav1.GetControllerOf(d)
		return ref != nil && ref.UID == app.UID && len(d.Spec.Template.Spec.Containers) == 1 && appContainer(d).Image == "demo:1"
	})
	if d.Spec.Selector.MatchLabels["app"] != "legacy" || d.Spec.Template.Labels["app"] != "legacy" {
		t.Errorf("selector %v / template labels %v, want the original app=legacy kept", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	svc := &corev1.Service{}
	eventually(t, "Service", func() (bool, error) { return true, env.Client.Get(ctx, key(ns, "legacy"), svc) })
	if svc.Spec.Selector["app"] != "legacy" {
		t.Errorf("Service selector = %v, want the adopted pods' labels", svc.Spec.Selector)
	}
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonReconciling)
}

func TestOrphanLeavesChildrenRunning(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "keep")
	app.Spec.DeletionPolicy = v1alpha1.WebAppDeletionOrphan
	app.Spec.Replicas = ptr.To[int32](2)
	create(t, app)
	deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	eventually(t, "finalizer", func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), app)
		return len(app.Finalizers) == 1, err
	})
	eventually(t, "PDB", func() (bool, error) {
		return true, env.Client.Get(ctx, key(ns, "keep"), &policyv1.PodDisruptionBudget{})
	})
	if err := env.Client.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "WebApp gone", func() (bool, error) {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(app), app)), nil
	})
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
		if err := env.Client.Get(ctx, key(ns, "keep"), obj); err != nil {
			t.Fatalf("%T: %v", obj, err)
		}
		if refs := obj.GetOwnerReferences(); len(refs) != 0 {
			t.Errorf("%T still has owner references %v", obj, refs)
		}
	}
}

// With deletionPolicy Delete there is no finalizer: garbage collection (not
// running in envtest; the e2e suite proves it) removes the children through
// their controller references.
func TestDeleteRelinquishesToGarbageCollection(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "gone")
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	if ref := metav1.GetControllerOf(d); ref == nil || ref.UID != app.UID {
		t.Fatalf("no controller reference on the Deployment")
	}
	if err := env.Client.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "WebApp gone at once", func() (bool, error) {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(app), app)), nil
	})
}

func TestDatabaseRefInjectsCredentials(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "withdb")
	app.Spec.DatabaseRef = &v1alpha1.WebAppDatabaseRef{Name: "orders"}
	create(t, app)
	waitMessage(t, app, v1alpha1.ConditionReady, "Waiting for Database orders to exist")
	// The Database controller generates the credentials Secret.
	create(t, &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}, Spec: v1alpha1.DatabaseSpec{Version: "16"}})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-credentials"}}
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	vars := map[string]string{}
	for _, e := range appContainer(d).Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			vars[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if vars["DATABASE_URL"] != "orders-credentials/uri" || vars["PGPASSWORD"] != "orders-credentials/password" || vars["PGHOST"] != "orders-credentials/host" {
		t.Errorf("env from the credentials Secret = %v", vars)
	}
	// A rotated password rolls the pods.
	first := d.Spec.Template.Annotations["daytwo.dev/config-hash"]
	update(t, secret, func(s *corev1.Secret) { s.StringData = map[string]string{"password": "b"} })
	deploymentOf(t, app, "rolled after rotation", func(d *appsv1.Deployment) bool {
		return d.Spec.Template.Annotations["daytwo.dev/config-hash"] != first
	})

	// A role of the Database's spec.roles: its Secret, once declared.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.DatabaseRef.Role = "orders_api" })
	waitMessage(t, app, v1alpha1.ConditionReady, "Waiting for login role orders_api in Database orders's spec.roles to exist")
	update(t, &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}, func(db *v1alpha1.Database) {
		db.Spec.Roles = []v1alpha1.DatabaseRole{{Name: "orders_api", Login: true}}
	})
	deploymentOf(t, app, "with the role's Secret", func(d *appsv1.Deployment) bool {
		for _, e := range appContainer(d).Env {
			if e.Name == "DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return e.ValueFrom.SecretKeyRef.Name == "orders-role-orders-api"
			}
		}
		return false
	})
}

// A revision that misses its progress deadline is rolled back to the
// previous ReplicaSet's template and stays rolled back until the spec changes.
// envtest runs no Deployment controller, so the test plays it: it writes the
// revision annotations, the old ReplicaSet and the Progressing condition.
func TestMissedDeadlineRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "roll")
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	good := d.Spec.Template.DeepCopy()
	good.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "good"
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "roll-good", Labels: good.Labels,
			Annotations:     map[string]string{"deployment.kubernetes.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: good.Labels}, Template: *good},
	}
	create(t, rs)

	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:broken" })
	d = deploymentOf(t, app, "with the broken image", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:broken" })
	update(t, d, func(d *appsv1.Deployment) {
		d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "2"}
	})
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}}
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	// Any reconcile notices; the Deployment status change triggers one.
	deploymentOf(t, app, "rolled back to demo:1", func(d *appsv1.Deployment) bool {
		return appContainer(d).Image == "demo:1" && d.Annotations["daytwo.dev/failed-template-hash"] != ""
	})
	c := condition(t, app, v1alpha1.ConditionProgressing, v1alpha1.ReasonRolledBack)
	if c.Message != "Image demo:broken missed its progress deadline; rolled back to demo:1" {
		t.Errorf("message = %q", c.Message)
	}
	condition(t, app, v1alpha1.ConditionDegraded, v1alpha1.ReasonRolledBack)

	// No flapping: further reconciles keep the good image.
	touch(t, app, "1")
	if d = deploymentOf(t, app, "still rolled back", func(*appsv1.Deployment) bool { return true }); appContainer(d).Image != "demo:1" {
		t.Fatalf("image = %s after a reconcile, want demo:1 kept", appContainer(d).Image)
	}
	// Nor after the Deployment is deleted: it is made again with the good
	// template, from the record the WebApp owns, not with the failed one.
	oldUID := d.UID
	if err := env.Client.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	d = deploymentOf(t, app, "made again", func(d *appsv1.Deployment) bool { return d.UID != oldUID })
	if appContainer(d).Image != "demo:1" || d.Annotations["daytwo.dev/failed-template-hash"] == "" {
		t.Fatalf("the Deployment made again runs %s (failed record %q), want demo:1 and the record kept",
			appContainer(d).Image, d.Annotations["daytwo.dev/failed-template-hash"])
	}
	// A new spec is tried again, and the failure mark goes, from the
	// record too: the failed revision, asked for again, is tried again,
	// and a Deployment deleted then is made with it.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:fixed" })
	deploymentOf(t, app, "with demo:fixed", func(d *appsv1.Deployment) bool {
		return appContainer(d).Image == "demo:fixed" && d.Annotations["daytwo.dev/failed-template-hash"] == ""
	})
	eventually(t, "the record cleared", func() (bool, error) {
		cm := &corev1.ConfigMap{}
		err := env.Client.Get(ctx, key(ns, "roll-failed-revision"), cm)
		return err == nil && cm.Annotations["daytwo.dev/failed-revision"] == "" && cm.Data["template.json"] == "", err
	})
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:broken" })
	d = deploymentOf(t, app, "demo:broken tried again", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:broken" })
	oldUID = d.UID
	if err := env.Client.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	d = deploymentOf(t, app, "made again", func(d *appsv1.Deployment) bool { return d.UID != oldUID })
	if appContainer(d).Image != "demo:broken" {
		t.Errorf("a stale record held back the revision asked for again: the Deployment runs %s", appContainer(d).Image)
	}
}

func TestIngressFollowsTheSpec(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "web")
	app.Spec.Ingress = &v1alpha1.WebAppIngress{Host: "shop.example.com", Path: "/", TLSSecretName: "shop-tls", ClassName: "nginx"}
	create(t, app)
	in := &networkingv1.Ingress{}
	eventually(t, "Ingress", func() (bool, error) { return true, env.Client.Get(ctx, key(ns, "web"), in) })
	if in.Spec.Rules[0].Host != "shop.example.com" || in.Spec.TLS[0].SecretName != "shop-tls" || ptr.Deref(in.Spec.IngressClassName, "") != "nginx" ||
		in.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name != "web" {
		t.Errorf("Ingress spec = %+v", in.Spec)
	}
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonReconciling)
	if app.Status.URL != "https://shop.example.com" {
		t.Errorf("url = %q", app.Status.URL)
	}
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Ingress = nil })
	eventually(t, "Ingress deleted", func() (bool, error) {
		return apierrors.IsNotFound(env.Client.Get(ctx, key(ns, "web"), &networkingv1.Ingress{})), nil
	})
}

// patchRequests counts the PATCH requests this process has sent (the
// operator's applies and status patches; the tests themselves use PUT).
func patchRequests(t *testing.T) float64 {
	t.Helper()
	return testenv.SumMetric(t, "rest_client_requests_total", "method", "PATCH")
}

// reconciles counts the reconciles the webapp controller has finished. A
// reconcile counts after it returned, so after every request it sent.
func reconciles(t *testing.T) float64 {
	t.Helper()
	return testenv.SumMetric(t, "controller_runtime_reconcile_total", "controller", "webapp")
}

// idle reports whether the webapp controller has nothing queued and nothing
// running: every request of the reconciles before has been counted.
func idle(t *testing.T) bool {
	t.Helper()
	return testenv.SumMetric(t, "workqueue_depth", "controller", "webapp") == 0 &&
		testenv.SumMetric(t, "controller_runtime_active_workers", "controller", "webapp") == 0
}

func waitIdle(t *testing.T) {
	t.Helper()
	eventually(t, "the webapp controller idle", func() (bool, error) { return idle(t), nil })
}

// touch relabels app and waits until the controller has finished a reconcile
// that started after everything before and is idle again. A label moves no
// generation and the status of an app that needs nothing stays the same, so
// the controller's own metrics are the evidence.
func touch(t *testing.T, app *v1alpha1.WebApp, value string) {
	t.Helper()
	settle(t, "relabelling "+app.Name, func() { update(t, app, func(a *v1alpha1.WebApp) { a.Labels = map[string]string{"touch": value} }) })
}

// settle runs change, then waits until the controller has finished a
// reconcile that started after it and is idle again: the barrier before a
// check that the change did nothing.
func settle(t *testing.T, what string, change func()) {
	t.Helper()
	waitIdle(t)
	n := reconciles(t)
	change()
	eventually(t, "a reconcile after "+what, func() (bool, error) { return reconciles(t) > n && idle(t), nil })
}

// A reconcile of an app whose children already match writes nothing.
func TestResyncOfAnUnchangedAppWritesNothing(t *testing.T) {
	ns := env.Namespace(t)
	app := newApp(ns, "quiet")
	app.Spec.Replicas = ptr.To[int32](2)
	app.Spec.Ingress = &v1alpha1.WebAppIngress{Host: "quiet.example.com"}
	create(t, app)
	d := deploymentOf(t, app, "created", func(*appsv1.Deployment) bool { return true })
	markAvailable(t, d)
	// Once the controller is idle, the status patch of the reconcile that
	// wrote Available is the last request counted before the measurement.
	condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonAvailable)
	waitIdle(t)

	before := patchRequests(t)
	for i := range 5 {
		touch(t, app, fmt.Sprint(i))
	}
	if got := patchRequests(t) - before; got != 0 {
		t.Errorf("5 reconciles of an unchanged app sent %v PATCH requests, want 0", got)
	}
	// The counter does count: a real change is written.
	update(t, app, func(a *v1alpha1.WebApp) { a.Spec.Image = "demo:2" })
	deploymentOf(t, app, "with demo:2", func(d *appsv1.Deployment) bool { return appContainer(d).Image == "demo:2" })
	if patchRequests(t) == before {
		t.Error("an image change sent no PATCH: the request counter does not see the operator")
	}
}
