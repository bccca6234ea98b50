package operator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts envtest and the operator's controllers exactly as `daytwo
// operator` wires them, runs the tests, and stops both.
func run(m *testing.M) int {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  operator.NewScheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err == nil {
		err = operator.SetupControllers(mgr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
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

	app := &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"}}
	waitForCondition(t, app, func() []metav1.Condition { return app.Status.Conditions },
		func() int64 { return app.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonNotImplemented)

	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}
	waitForCondition(t, db, func() []metav1.Condition { return db.Status.Conditions },
		func() int64 { return db.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonNotImplemented)

	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-nightly"}}
	waitForCondition(t, b, func() []metav1.Condition { return b.Status.Conditions },
		func() int64 { return b.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonNotImplemented)
}

// A schedule can match the schema's shape and still not parse (minute 61);
// only the controller can tell, and it says so in a condition naming the field.
func TestUnparseableScheduleBecomesACondition(t *testing.T) {
	ns := env.Namespace(t)
	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-schedule"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Schedule:    "61 * * * *",
			Storage:     v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}},
		},
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	c := waitForCondition(t, b, func() []metav1.Condition { return b.Status.Conditions },
		func() int64 { return b.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonInvalidSpec)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "spec.schedule") {
		t.Errorf("condition = %+v, want Ready=False naming spec.schedule", c)
	}

	// Fixing the spec clears the condition: the error was terminal for that
	// generation only.
	b.Spec.Schedule = "1 * * * *"
	if err := env.Client.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitForCondition(t, b, func() []metav1.Condition { return b.Status.Conditions },
		func() int64 { return b.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonNotImplemented)
}
