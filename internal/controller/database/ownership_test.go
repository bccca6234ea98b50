package database_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Objects of a child's name that the Database does not control are not
// taken over (nor later garbage-collected with it) unless it asks to adopt.
func TestForeignChildrenAreNotTakenOver(t *testing.T) {
	ns := env.Namespace(t)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-config"}, Data: map[string]string{"team": "payments"}}
	create(t, foreign)
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
	}
	create(t, budget)
	db := newDB(ns, "orders")
	create(t, db)
	db = waitCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflictingResource)
	if msg := condition(db, v1alpha1.ConditionReady).Message; msg != "ConfigMap orders-config exists and is not managed by daytwo; annotate the Database with daytwo.dev/adopt=true to adopt it" {
		t.Errorf("message %q", msg)
	}
	cm, err := get(ns, "orders-config", &corev1.ConfigMap{})
	if err != nil || cm.Data["team"] != "payments" || len(cm.OwnerReferences) != 0 {
		t.Fatalf("the foreign ConfigMap was touched: %v %+v", err, cm)
	}

	// Adopting takes over the ConfigMap; a budget someone else then
	// controls is reported, not taken. (The budget is given its owner only
	// once the ConfigMap is adopted: a conflict stops every write, so the
	// other order would decide the outcome by which reconcile came first.)
	update(t, db, func(d *v1alpha1.Database) { d.Annotations = map[string]string{v1alpha1.AnnotationAdopt: "true"} })
	eventually(t, "the ConfigMap adopted", func() (bool, error) {
		cm, err := get(ns, "orders-config", &corev1.ConfigMap{})
		ref := metav1.GetControllerOf(cm)
		return err == nil && ref != nil && ref.UID == db.UID && cm.Data["postgresql.conf"] != "", err
	})
	update(t, budget, func(b *policyv1.PodDisruptionBudget) {
		b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "1234", Controller: ptr.To(true)}}
	})
	// A change to an object the Database never controlled wakes no
	// reconcile of it (its owner events go to ConfigMap other); touch the
	// Database so the next pass looks, as a resync or any change would.
	update(t, db, func(d *v1alpha1.Database) { d.Annotations["test.daytwo.dev/nudge"] = "1" })
	eventually(t, "the budget reported as another's", func() (bool, error) {
		d, err := get(ns, "orders", &v1alpha1.Database{})
		c := condition(d, v1alpha1.ConditionReady)
		return err == nil && c != nil && c.Reason == v1alpha1.ReasonConflictingResource &&
			c.Message == "PodDisruptionBudget orders is controlled by ConfigMap other", err
	})
	if _, err := get(ns, "orders", &policyv1.PodDisruptionBudget{}); err != nil {
		t.Fatalf("a one-instance Database deleted a budget it does not own: %v", err)
	}
}

// deletionPolicy Delete removes the StatefulSet's own volumes, not every
// volume that carries the Database's label.
func TestDeleteRemovesOnlyItsOwnVolumes(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "gone", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete })
	create(t, db)
	waitCondition(t, ns, "gone", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
	volume(t, ns, "gone", "standard", "1Gi")
	other := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "reports", Namespace: ns, Labels: map[string]string{"daytwo.dev/database": "gone"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	create(t, other)
	if err := env.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Database gone and its own volume deleted", func() (bool, error) {
		_, err := get(ns, "gone", &v1alpha1.Database{})
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		pvc, err := get(ns, "pgdata-gone-0", &corev1.PersistentVolumeClaim{})
		return apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
	})
	if pvc, err := get(ns, "reports", &corev1.PersistentVolumeClaim{}); err != nil || !pvc.DeletionTimestamp.IsZero() {
		t.Fatalf("a volume that only carries the label was deleted: %v", err)
	}
}
