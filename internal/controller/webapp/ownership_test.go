package webapp_test

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A PodDisruptionBudget of the app's name that daytwo does not control is
// neither taken over nor deleted, however many replicas the app runs.
func TestForeignBudgetIsLeftAlone(t *testing.T) {
	ns := env.Namespace(t)
	foreign := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(5)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
	}
	create(t, foreign)
	app := newApp(ns, "shop")
	app.Spec.Replicas = ptr.To[int32](1) // one replica: daytwo would delete its budget
	create(t, app)
	c := condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonConflictingResource)
	if c.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %s, want False", c.Status)
	}
	got := &policyv1.PodDisruptionBudget{}
	if err := env.Client.Get(ctx, key(ns, "shop"), got); err != nil || got.Spec.MinAvailable.IntValue() != 5 || len(got.OwnerReferences) != 0 {
		t.Fatalf("the foreign budget was touched: %v %+v", err, got)
	}
}
