package operator

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"

	"github.com/daytwo-dev/daytwo/internal/controller"
)

// The transform runs again on objects it already transformed (an
// informer's resync hands them back): the fingerprint must survive, and one
// the server holds must not pass for daytwo's.
func TestTransformIsIdempotentAndTrustsOnlyItself(t *testing.T) {
	fields := `{"f:spec":{"f:replicas":{}}}`
	served := func(annotations map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Annotations: annotations,
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: controller.FieldOwner, Operation: metav1.ManagedFieldsOperationApply,
					APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}}},
			Spec: appsv1.DeploymentSpec{Replicas: new(int32(3)), Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"daytwo.dev/template-hash": "abc"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "shop:1", Args: []string{"--big"}}}}}},
			Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
				Reason: "NewReplicaSetAvailable", Message: `ReplicaSet "web-5d9f" has successfully progressed.`}}},
		}
	}
	want := controller.Fingerprint(appsv1ac.Deployment("web", "ns").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(3)))

	d := served(nil)
	for range 2 {
		if _, err := transform(d); err != nil {
			t.Fatal(err)
		}
		if got := d.Annotations[controller.CachedOwnedFingerprint]; got != want {
			t.Fatalf("fingerprint %q, want %q", got, want)
		}
	}
	if len(d.ManagedFields) != 0 || len(d.Spec.Template.Spec.Containers[0].Args) != 0 || d.Spec.Template.Labels != nil ||
		d.Status.Conditions[0].Message != "" {
		t.Fatalf("the cached Deployment kept more than it should: %+v", d)
	}
	if d.Spec.Template.Spec.Containers[0].Image != "shop:1" || d.Spec.Template.Annotations["daytwo.dev/template-hash"] != "abc" ||
		d.Status.Conditions[0].Reason != "NewReplicaSetAvailable" || *d.Spec.Replicas != 3 {
		t.Fatalf("the cached Deployment lost what the WebApp controller reads: %+v", d)
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ManagedFields: []metav1.ManagedFieldsEntry{{
		Manager: controller.FieldOwner, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:selector":{}}}`)}}}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.0.0.1"}}
	if _, err := transform(svc); err != nil {
		t.Fatal(err)
	}
	if svc.Annotations[controller.CachedOwnedFingerprint] == "" || svc.Spec.ClusterIP != "" || svc.Spec.Selector != nil {
		t.Fatalf("the cached Service is not its metadata and fingerprint: %+v", svc)
	}

	forged := served(map[string]string{controller.CachedOwnedFingerprint: want})
	forged.ManagedFields[0].Manager = "someone"
	if _, err := transform(forged); err != nil {
		t.Fatal(err)
	}
	if _, ok := forged.Annotations[controller.CachedOwnedFingerprint]; ok {
		t.Fatal("a fingerprint annotation from the server survived the transform")
	}
}
