package database_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// A pod that carries a Database's labels but that its StatefulSet does not
// control (anyone who can create pods can make one) is no instance: it is
// neither asked for its status, nor labelled, nor sent the API token.
func TestLookAlikePodIsNoInstance(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "app"))
	waitStatefulSet(t, ns, "app")
	fakeStatefulSetController(t, ns, "app", "rev-1")
	sts, _ := get(ns, "app", &appsv1.StatefulSet{})
	fake := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: ns, Labels: sts.Spec.Template.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: postgres.DefaultImage("17")}}}}
	create(t, fake)
	updateStatus(t, fake, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	})
	db, _ := get(ns, "app", &v1alpha1.Database{})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	eventually(t, "the new generation observed", func() (bool, error) {
		d, err := get(ns, "app", &v1alpha1.Database{})
		return err == nil && d.Status.ObservedGeneration == d.Generation, err
	})
	d, _ := get(ns, "app", &v1alpha1.Database{})
	for _, s := range d.Status.InstanceStatuses {
		if s.Name == "app-1" {
			t.Errorf("the look-alike pod is listed as an instance: %+v", s)
		}
	}
	if d.Status.ReadyInstances != 1 {
		t.Errorf("readyInstances %d, want 1 (the look-alike counted)", d.Status.ReadyInstances)
	}
	if p, _ := get(ns, "app-1", &corev1.Pod{}); p.Labels[database.LabelRole] != "" {
		t.Errorf("the look-alike pod was labelled %s", p.Labels[database.LabelRole])
	}
}
