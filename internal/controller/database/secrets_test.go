package database_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A Secret or Service of a child's name that someone else made is reported
// and never written, whatever kind it is.
func TestForeignSecretAndServiceAreReported(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		obj       client.Object
		untouched func(t *testing.T, ns string)
	}{
		{"credentials Secret", "Secret orders-credentials exists and does not belong to this Database",
			&corev1.Secret{StringData: map[string]string{"password": "theirs"}},
			func(t *testing.T, ns string) {
				s, err := get(ns, "orders-credentials", &corev1.Secret{})
				if err != nil || string(s.Data["password"]) != "theirs" || len(s.OwnerReferences) != 0 {
					t.Fatalf("the foreign Secret was touched: %v %v", err, s.OwnerReferences)
				}
			}},
		{"primary Service", "Service orders-rw exists and is not managed by daytwo; annotate the Database with daytwo.dev/adopt=true to adopt it",
			&corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 6543}}, Selector: map[string]string{"team": "payments"}}},
			func(t *testing.T, ns string) {
				s, err := get(ns, "orders-rw", &corev1.Service{})
				if err != nil || s.Spec.Ports[0].Port != 6543 || s.Spec.Selector["team"] != "payments" || len(s.OwnerReferences) != 0 {
					t.Fatalf("the foreign Service was touched: %v %+v", err, s.Spec)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			name := "orders-credentials"
			if _, ok := tc.obj.(*corev1.Service); ok {
				name = "orders-rw"
			}
			tc.obj.SetNamespace(ns)
			tc.obj.SetName(name)
			create(t, tc.obj)
			create(t, newDB(ns, "orders"))
			db := waitCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflictingResource)
			if msg := condition(db, v1alpha1.ConditionReady).Message; msg != tc.msg {
				t.Errorf("message %q, want %q", msg, tc.msg)
			}
			tc.untouched(t, ns)
		})
	}
}
