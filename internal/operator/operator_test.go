package operator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var stop func() error
	var err error
	env, stop, err = testenv.StartOperator()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		return 1
	}
	return code
}

// waitForCondition polls obj until its condition typ has the reason, and the
// status describes the current generation.
func waitForCondition(t *testing.T, obj client.Object, conds func() []metav1.Condition, observed func() int64, typ, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(conds(), typ)
		if c == nil || c.Reason != reason || observed() != obj.GetGeneration() {
			return false, nil
		}
		got = *c
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s/%s never got %s reason %s: %v (conditions %+v)", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), typ, reason, err, conds())
	}
	return got
}

func TestSamplesAreAcceptedAndReported(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("want the three samples, got %v (%v)", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "kustomization.yaml") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		u.SetNamespace(ns)
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("%s refused: %v", filepath.Base(f), err)
		}
	}

	// envtest runs no Deployment or StatefulSet controller, so the WebApp waits
	// for replicas and the Database for its primary.
	app := &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"}}
	waitForCondition(t, app, func() []metav1.Condition { return app.Status.Conditions },
		func() int64 { return app.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonReconciling)

	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}
	waitForCondition(t, db, func() []metav1.Condition { return db.Status.Conditions },
		func() int64 { return db.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonPrimaryNotReady)

	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-nightly"}}
	waitForCondition(t, b, func() []metav1.Condition { return b.Status.Conditions },
		func() int64 { return b.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonScheduled)
}

// What the schema cannot check (a schedule of the right shape that does
// not parse, a time zone the tz database does not know, an image of another
// major) is refused at admission by daytwo's webhook, which the real API
// server calls, with the field named.
func TestWebhookRefusesWhatTheSchemaCannotCheck(t *testing.T) {
	ns := env.Namespace(t)
	backup := func(schedule, tz string) *v1alpha1.DatabaseBackup {
		b := &v1alpha1.DatabaseBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
			Spec: v1alpha1.DatabaseBackupSpec{
				DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
				Schedule:    schedule,
				Storage:     v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}},
			},
		}
		if tz != "" {
			b.Spec.TimeZone = &tz
		}
		return b
	}
	for _, c := range []struct {
		name string
		obj  client.Object
		want string
	}{
		{"minute 61", backup("61 * * * *", ""), "spec.schedule"},
		{"unknown time zone", backup("0 3 * * *", "Mars/Olympus"), "spec.timeZone"},
		{"image of another major", &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mixed"},
			Spec: v1alpha1.DatabaseSpec{Version: "15", Image: "postgres:16.1"}}, "spec.image"},
	} {
		err := env.Client.Create(context.Background(), c.obj)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "denied the request") {
			t.Errorf("%s: %v, want the webhook to refuse it naming %s", c.name, err, c.want)
		}
	}
	// A good spec passes, and an update is checked too.
	b := backup("0 3 * * *", "Europe/Berlin")
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatalf("a valid DatabaseBackup was refused: %v", err)
	}
	// The operator writes the object too: retry on conflicts until the
	// update reaches admission.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.Schedule = "0 25 * * *"
		return env.Client.Update(context.Background(), b)
	})
	if err == nil || !strings.Contains(err.Error(), "spec.schedule") {
		t.Fatalf("an update to hour 25: %v", err)
	}
}

// The cache stores daytwo's Deployments and Services slim (slim.go); a
// read through it, Get or List, gives the full kind with what the
// transform keeps, as the API server last sent it, and so does an event
// to a handler.
func TestCacheReadsSlimChildrenWhole(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	labels := map[string]string{controller.ManagedByLabel: controller.ManagedBy}
	// An apply fills its configuration with the server's answer: each use gets a fresh one.
	dep := func() *appsv1ac.DeploymentApplyConfiguration {
		return appsv1ac.Deployment("slim", ns).WithLabels(labels).WithSpec(appsv1ac.DeploymentSpec().WithReplicas(2).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"app": "slim"})).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(map[string]string{"app": "slim"}).
				WithAnnotations(map[string]string{"daytwo.dev/template-hash": "h1"}).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage("shop:1")))))
	}
	svc := func() *corev1ac.ServiceApplyConfiguration {
		return corev1ac.Service("slim", ns).WithLabels(labels).WithSpec(corev1ac.ServiceSpec().
			WithSelector(map[string]string{"app": "slim"}).WithPorts(corev1ac.ServicePort().WithPort(80)))
	}
	if err := env.Client.Apply(ctx, dep(), client.FieldOwner(controller.FieldOwner)); err != nil {
		t.Fatal(err)
	}
	live := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slim"}, live); err != nil {
		t.Fatal(err)
	}
	live.Status = appsv1.DeploymentStatus{ObservedGeneration: live.Generation, Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}}
	if err := env.Client.Status().Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Apply(ctx, svc(), client.FieldOwner(controller.FieldOwner)); err != nil {
		t.Fatal(err)
	}

	got := &appsv1.Deployment{}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slim"}, got); client.IgnoreNotFound(err) != nil {
			return false, err
		}
		return got.Status.ReadyReplicas == 1, nil
	})
	if err != nil {
		t.Fatalf("the cache never read the Deployment's status: %v (%+v)", err, got)
	}
	if got.UID != live.UID || *got.Spec.Replicas != 2 || got.Spec.Selector == nil || got.Status.UpdatedReplicas != 2 ||
		got.Status.Conditions[0].Reason != "NewReplicaSetAvailable" || got.Kind != "Deployment" ||
		got.Annotations[controller.CachedImagePrefix+"app"] != "shop:1" ||
		got.Annotations[controller.CachedTemplatePrefix+"daytwo.dev/template-hash"] != "h1" ||
		!controller.Unchanged(got, dep(), appsv1ac.ExtractDeployment) {
		t.Fatalf("the cache's Deployment lost what controllers read: %+v", got)
	}
	// A caller's changes stay its own.
	got.Annotations["mine"] = "x"
	again := &appsv1.Deployment{}
	if err := env.Cache.Get(ctx, client.ObjectKeyFromObject(got), again); err != nil || again.Annotations["mine"] != "" {
		t.Fatalf("a read shares the cache's copy (%v): %v", err, again.Annotations)
	}
	list := &appsv1.DeploymentList{}
	if err := env.Cache.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 || list.Items[0].Status.ReadyReplicas != 1 {
		t.Fatalf("a List through the cache: %v, %+v", err, list.Items)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		s := &corev1.Service{}
		if err := env.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slim"}, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return controller.Unchanged(s, svc(), corev1ac.ExtractService), nil
	})
	if err != nil {
		t.Fatalf("the cache's Service never held daytwo's fingerprint: %v", err)
	}

	// Event handlers get the full kinds: controller-runtime's typed
	// sources (source.Kind on *appsv1.Deployment) type-assert them.
	informers, ok := env.Cache.(cache.Cache)
	if !ok {
		t.Fatalf("the test environment's cache is a %T", env.Cache)
	}
	seen := make(chan string, 4)
	created := toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		var got string
		switch o := obj.(type) {
		case *appsv1.Deployment:
			if o.Namespace == ns && o.Spec.Replicas != nil && *o.Spec.Replicas == 2 {
				got = "Deployment " + o.Name
			}
		case *corev1.Service:
			if o.Namespace == ns {
				got = "Service " + o.Name
			}
		}
		if got != "" {
			select {
			case seen <- got:
			default: // reported already
			}
		}
	}}
	for _, kind := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		inf, err := informers.GetInformer(ctx, kind)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := inf.AddEventHandlerWithOptions(created, toolscache.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = inf.RemoveEventHandler(reg) }()
	}
	want := map[string]bool{"Deployment slim": true, "Service slim": true}
	for len(want) > 0 {
		select {
		case got := <-seen:
			delete(want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event of the full kind for %v", want)
		}
	}
}
