package webapp_test

import (
	"fmt"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// An HPA or an Ingress of the app's name that daytwo does not control is
// reported and left as it is.
func TestForeignAutoscalerAndIngressAreLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     client.Object
		mutate  func(*v1alpha1.WebApp)
		current func(ns string) (client.Object, error)
	}{
		{"HorizontalPodAutoscaler",
			&autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 42,
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "theirs"}}},
			func(a *v1alpha1.WebApp) {
				a.Spec.Replicas = nil
				a.Spec.Autoscaling = &v1alpha1.WebAppAutoscaling{MinReplicas: 2, MaxReplicas: 6, TargetCPUUtilizationPercentage: 70}
			},
			func(ns string) (client.Object, error) {
				h := &autoscalingv2.HorizontalPodAutoscaler{}
				err := env.Client.Get(ctx, key(ns, "shop"), h)
				if err == nil && (h.Spec.MaxReplicas != 42 || h.Spec.ScaleTargetRef.Name != "theirs") {
					err = fmt.Errorf("spec changed: %+v", h.Spec)
				}
				return h, err
			}},
		{"Ingress",
			&networkingv1.Ingress{Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "theirs.example.com"}}}},
			func(a *v1alpha1.WebApp) {
				a.Spec.Ingress = &v1alpha1.WebAppIngress{Host: "shop.example.com", Path: "/"}
			},
			func(ns string) (client.Object, error) {
				in := &networkingv1.Ingress{}
				err := env.Client.Get(ctx, key(ns, "shop"), in)
				if err == nil && in.Spec.Rules[0].Host != "theirs.example.com" {
					err = fmt.Errorf("spec changed: %+v", in.Spec)
				}
				return in, err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			tc.obj.SetNamespace(ns)
			tc.obj.SetName("shop")
			create(t, tc.obj)
			app := newApp(ns, "shop")
			tc.mutate(app)
			create(t, app)
			c := condition(t, app, v1alpha1.ConditionReady, v1alpha1.ReasonConflictingResource)
			if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tc.name+" shop") {
				t.Errorf("Ready = %s %q", c.Status, c.Message)
			}
			got, err := tc.current(ns)
			if err != nil || len(got.GetOwnerReferences()) != 0 {
				t.Fatalf("the foreign %s was touched: %v %v", tc.name, err, got.GetOwnerReferences())
			}
		})
	}
}
