package database_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// The reconcile pause: a spec change made while paused reaches nothing
// (the condition's generation is the barrier: a reconcile saw the change
// and left it), and lands once the annotation goes.
func TestPausedDatabaseIsLeftAlone(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "still")
	create(t, db)
	waitStatefulSet(t, ns, "still")
	update(t, db, func(d *v1alpha1.Database) {
		d.Annotations = map[string]string{v1alpha1.AnnotationReconcile: v1alpha1.ReconcilePaused}
		d.Spec.Instances = ptr.To[int32](3)
	})
	eventually(t, "the pause seen at the new generation", func() (bool, error) {
		d, err := get(ns, "still", &v1alpha1.Database{})
		c := condition(d, v1alpha1.ConditionReconcilePaused)
		return err == nil && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == d.Generation, err
	})
	if sts, _ := get(ns, "still", &appsv1.StatefulSet{}); *sts.Spec.Replicas != 1 {
		t.Fatalf("a paused Database was scaled to %d", *sts.Spec.Replicas)
	}
	update(t, db, func(d *v1alpha1.Database) { delete(d.Annotations, v1alpha1.AnnotationReconcile) })
	eventually(t, "the scale-up after the pause", func() (bool, error) {
		sts, err := get(ns, "still", &appsv1.StatefulSet{})
		return err == nil && *sts.Spec.Replicas == 3, err
	})
	// The status is written at the end of the reconcile that scaled.
	eventually(t, "the pause's condition gone", func() (bool, error) {
		d, err := get(ns, "still", &v1alpha1.Database{})
		return err == nil && condition(d, v1alpha1.ConditionReconcilePaused) == nil, err
	})
}

// Hibernation with the primary on the first instance: every instance
// stops, the volumes kept (claims retained on scale-down), Ready says
// so, scheduled backups skip; Off starts them again.
func TestHibernationStopsAndWakes(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "sleepy", func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](2) })
	create(t, db)
	waitStatefulSet(t, ns, "sleepy")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Hibernation = v1alpha1.HibernationOn })
	d := waitCondition(t, ns, "sleepy", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonHibernated)
	sts, _ := get(ns, "sleepy", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 0 || sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		d.Status.Phase != v1alpha1.DatabasePhaseHibernated {
		t.Fatalf("hibernated: replicas %d, claims %s when scaled, phase %s", *sts.Spec.Replicas,
			sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled, d.Status.Phase)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Hibernation = v1alpha1.HibernationOff })
	eventually(t, "the instances back", func() (bool, error) {
		sts, err := get(ns, "sleepy", &appsv1.StatefulSet{})
		return err == nil && *sts.Spec.Replicas == 2, err
	})
}

// deletionPolicy Orphan: the Database goes, and everything the running
// instances need is released from it (envtest has no garbage collector,
// so what is checked is that no owner reference to it is left).
func TestOrphanReleasesTheInstances(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "loose", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionOrphan })
	create(t, db)
	waitStatefulSet(t, ns, "loose")
	eventually(t, "the instances' ServiceAccount and Lease", func() (bool, error) {
		_, err := get(ns, "loose-instance", &corev1.ServiceAccount{})
		if err == nil {
			_, err = get(ns, "loose-primary", &coordinationv1.Lease{})
		}
		return err == nil, ignoreNotFound(err)
	})
	uid := db.UID
	if err := env.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Database gone", func() (bool, error) {
		_, err := get(ns, "loose", &v1alpha1.Database{})
		return err != nil, ignoreNotFound(err)
	})
	check := func(obj client.Object, name string) {
		if _, err := get(ns, name, obj); err != nil {
			t.Errorf("%T %s: %v", obj, name, err)
			return
		}
		for _, ref := range obj.GetOwnerReferences() {
			if ref.UID == uid {
				t.Errorf("%T %s still names the deleted Database as its owner", obj, name)
			}
		}
	}
	check(&appsv1.StatefulSet{}, "loose")
	check(&corev1.Service{}, "loose-rw")
	check(&corev1.Secret{}, "loose-credentials")
	check(&corev1.ServiceAccount{}, "loose-instance")
	check(&coordinationv1.Lease{}, "loose-primary")
	check(&corev1.ConfigMap{}, "loose-config")
}
