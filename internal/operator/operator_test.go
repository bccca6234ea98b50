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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
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
	// generation only. (No Database exists here, which is the next thing said.)
	b.Spec.Schedule = "1 * * * *"
	if err := env.Client.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitForCondition(t, b, func() []metav1.Condition { return b.Status.Conditions },
		func() int64 { return b.Status.ObservedGeneration }, v1alpha1.ConditionReady, v1alpha1.ReasonDatabaseNotFound)
}
