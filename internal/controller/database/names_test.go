package database

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// Every child carries the selector's label and daytwo's, so the informer
// caches (controller.ManagedByLabel) and the Services find it.
func TestLabelsHoldTheSelector(t *testing.T) {
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"}}
	l := labels(db)
	for k, v := range selectorLabels(db) {
		if l[k] != v {
			t.Errorf("labels lack the selector's %s=%s: %v", k, v, l)
		}
	}
	if l[controller.ManagedByLabel] != controller.ManagedBy {
		t.Errorf("labels lack %s: %v", controller.ManagedByLabel, l)
	}
	if podName(db, 2) != "orders-2" || pvcName(db, 2) != "pgdata-orders-2" {
		t.Errorf("pod and volume names: %s, %s", podName(db, 2), pvcName(db, 2))
	}
}
