package database

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

func TestPhase(t *testing.T) {
	ready := *pod("orders-0", "r", true)
	for _, tt := range []struct {
		name string
		obs  observation
		want v1alpha1.DatabasePhase
	}{
		{"first start", observation{View: ha.View{Primary: "orders-0", Pods: []corev1.Pod{*pod("orders-0", "r", false)}}, plan: plan{instances: 1}}, v1alpha1.DatabasePhaseCreating},
		{"ready", observation{View: ha.View{Primary: "orders-0", Pods: []corev1.Pod{ready}}, plan: plan{instances: 1}, found: findings{in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1"}}, v1alpha1.DatabasePhaseReady},
		{"rolling an image", observation{View: ha.View{Primary: "orders-0", Pods: []corev1.Pod{ready}}, plan: plan{instances: 1}, found: findings{in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:2"}}, v1alpha1.DatabasePhaseUpgrading},
		{"restart pending", observation{View: ha.View{Primary: "orders-0", Pods: []corev1.Pod{ready}}, plan: plan{instances: 1}, found: findings{in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1", outdated: 1}}, v1alpha1.DatabasePhaseUpgrading},
		{"a replica down", observation{View: ha.View{Primary: "orders-0", Pods: []corev1.Pod{ready}}, plan: plan{instances: 2}, found: findings{in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1"}}, v1alpha1.DatabasePhaseDegraded},
		{"rolled back", observation{View: ha.View{Primary: "orders-0", Pods: []corev1.Pod{ready}}, plan: plan{instances: 1}, found: findings{in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1", rolledBack: "x"}}, v1alpha1.DatabasePhaseDegraded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := newDB()
			setStatus(db, &tt.obs)
			if db.Status.Phase != tt.want {
				t.Errorf("phase = %s, want %s", db.Status.Phase, tt.want)
			}
		})
	}
}
