package database

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// reconcileStorage grows the instances' volumes to spec by patching their
// claims (the StatefulSet's claim template is immutable), when the
// StorageClass allows it. Otherwise, and for a shrink, it reports why not.
func (r *Reconciler) reconcileStorage(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, pvcs, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db))); err != nil {
		return fmt.Errorf("failed to list volumes: %w", err)
	}
	want := obs.plan.storage
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		cur := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		switch want.Cmp(cur) {
		case -1:
			obs.found.storageReason, obs.found.storageFinal = v1alpha1.ReasonShrinkUnsupported, true
			obs.found.storageMessage = fmt.Sprintf("Volumes stay at %s, larger than the %s spec asks for: volumes never shrink, so nothing waits",
				cur.String(), want.String())
			return nil
		case 1:
			class, err := r.storageClass(ctx, pvc)
			if err != nil {
				return err
			}
			if class == nil || class.AllowVolumeExpansion == nil || !*class.AllowVolumeExpansion {
				obs.found.storageReason = v1alpha1.ReasonExpansionUnsupported
				obs.found.storageMessage = fmt.Sprintf("StorageClass %s does not allow volume expansion; volumes stay at %s (spec asks for %s)",
					classNameOf(pvc), cur.String(), want.String())
				return nil
			}
			base := pvc.DeepCopy()
			pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
			if err := r.Client.Patch(ctx, pvc, client.MergeFrom(base)); err != nil {
				return fmt.Errorf("failed to grow volume %s: %w", pvc.Name, err)
			}
			controller.Event(ctx, r.Recorder, db, pvc, corev1.EventTypeNormal, v1alpha1.ReasonResizing, "Resize",
				"Growing volume %s from %s to %s", pvc.Name, cur.String(), want.String())
		}
		if got := pvc.Status.Capacity[corev1.ResourceStorage]; !got.IsZero() && got.Cmp(want) < 0 {
			obs.found.storageReason = v1alpha1.ReasonResizing
			obs.found.storageMessage = fmt.Sprintf("Volume %s is %s, growing to %s", pvc.Name, got.String(), want.String())
		}
	}
	return nil
}

func (r *Reconciler) storageClass(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, error) {
	name := classNameOf(pvc)
	if name == "" {
		return nil, nil
	}
	class := &storagev1.StorageClass{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, class)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to get StorageClass %s: %w", name, err)
	}
	return class, nil
}

func classNameOf(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.StorageClassName == nil {
		return ""
	}
	return *pvc.Spec.StorageClassName
}
