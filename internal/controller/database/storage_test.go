package database_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// volume creates a claim as the StatefulSet controller would for pod 0,
// bound in advance to volumeName when one is given.
func volume(t *testing.T, ns, db, class, size string, volumeName ...string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pgdata-" + db + "-0", Namespace: ns, Labels: map[string]string{"daytwo.dev/database": db}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if len(volumeName) > 0 {
		pvc.Spec.VolumeName = volumeName[0]
	}
	create(t, pvc)
	return pvc
}

func TestStorageGrowthNeedsAnExpandableClass(t *testing.T) {
	ns := env.Namespace(t)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fixed-" + ns}, Provisioner: "example.com/fixed"}
	create(t, class)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, class) })
	db := newDB(ns, "grow", func(d *v1alpha1.Database) {
		d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To(class.Name)}
	})
	create(t, db)
	volume(t, ns, "grow", class.Name, "1Gi")
	waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionFalse, v1alpha1.ReasonUpToDate)

	update(t, db, func(d *v1alpha1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi")) })
	db = waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionTrue, v1alpha1.ReasonExpansionUnsupported)
	if msg := condition(db, v1alpha1.ConditionStorageResizePending).Message; !strings.Contains(msg, class.Name) || !strings.Contains(msg, "2Gi") {
		t.Errorf("message = %q", msg)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("512Mi")) })
	// A shrink never happens, so nothing is pending (the seed's large to
	// medium left it True for good): False, and the reason says why.
	db = waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionFalse, v1alpha1.ReasonShrinkUnsupported)
	if msg := condition(db, v1alpha1.ConditionStorageResizePending).Message; !strings.Contains(msg, "never shrink") {
		t.Errorf("message = %q", msg)
	}
}

func TestStorageGrowsWhenTheClassAllowsIt(t *testing.T) {
	ns := env.Namespace(t)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "elastic-" + ns}, Provisioner: "example.com/elastic",
		AllowVolumeExpansion: ptr.To(true)}
	create(t, class)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, class) })
	db := newDB(ns, "grow", func(d *v1alpha1.Database) {
		d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To(class.Name)}
	})
	create(t, db)
	// A bound claim, as the provisioner would leave it: only bound claims resize.
	pvc := volume(t, ns, "grow", class.Name, "1Gi", "pv-"+ns)
	updateStatus(t, pvc, func(p *corev1.PersistentVolumeClaim) {
		p.Status.Phase = corev1.ClaimBound
		p.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("3Gi")) })
	eventually(t, "the claim asking for 3Gi", func() (bool, error) {
		got, err := get(ns, pvc.Name, &corev1.PersistentVolumeClaim{})
		return err == nil && got.Spec.Resources.Requests.Storage().String() == "3Gi", err
	})
	waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionTrue, v1alpha1.ReasonResizing)
}
