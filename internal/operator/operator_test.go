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
	"k8s.io/client-go/util/retry"
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
