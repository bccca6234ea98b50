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
			Spec: appsv1.DeploymentSpec{Replicas: new(int32(3)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "shop:1", Args: []string{"--big"}}}}}},
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
	if len(d.ManagedFields) != 0 || len(d.Spec.Template.Spec.Containers[0].Args) != 0 || d.Spec.Template.Spec.Containers[0].Image != "shop:1" {
		t.Fatalf("the cached Deployment kept more than it should: %+v", d)
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
