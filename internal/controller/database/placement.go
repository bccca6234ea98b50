package database

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// placeInstances sets where the instances run: spec.placement, or the
// defaults (apart by node where the nodes allow, spread across zones).
// Unset fields leave the template as it always was, so an operator upgrade
// restarts no instance.
func placeInstances(db *v1alpha1.Database, spec *corev1ac.PodSpecApplyConfiguration) {
	pl := ptr.Deref(db.Spec.Placement, v1alpha1.DatabasePlacement{})
	sel := selectorLabels(db)
	controller.Place(spec, pl.Placement, db.Spec.ImagePullSecrets)
	aff := controller.ApplyConfig[corev1ac.AffinityApplyConfiguration](pl.Affinity)
	if aff == nil {
		aff = corev1ac.Affinity()
	}
	if aff.PodAntiAffinity == nil {
		aff.PodAntiAffinity = instanceAntiAffinity(pl.AntiAffinity, sel)
	}
	if aff.NodeAffinity != nil || aff.PodAffinity != nil || aff.PodAntiAffinity != nil {
		spec.WithAffinity(aff)
	}
	if len(pl.TopologySpreadConstraints) == 0 {
		// Instances spread across zones where the nodes have them; a
		// cluster without zones, or with one, still schedules them all.
		spec.WithTopologySpreadConstraints(corev1ac.TopologySpreadConstraint().
			WithMaxSkew(1).
			WithTopologyKey(corev1.LabelTopologyZone).
			WithWhenUnsatisfiable(corev1.ScheduleAnyway).
			WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(sel)))
		return
	}
	for _, c := range controller.ApplyConfigs[corev1ac.TopologySpreadConstraintApplyConfiguration](pl.TopologySpreadConstraints) {
		if c.LabelSelector == nil {
			c.WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(sel))
		}
		spec.WithTopologySpreadConstraints(c)
	}
}

// instanceAntiAffinity keeps instances off each other's nodes, as mode
// says (Preferred when unset).
func instanceAntiAffinity(mode v1alpha1.AntiAffinityMode, sel map[string]string) *corev1ac.PodAntiAffinityApplyConfiguration {
	term := corev1ac.PodAffinityTerm().
		WithTopologyKey(corev1.LabelHostname).
		WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(sel))
	switch mode {
	case v1alpha1.AntiAffinityNone:
		return nil
	case v1alpha1.AntiAffinityRequired:
		return corev1ac.PodAntiAffinity().WithRequiredDuringSchedulingIgnoredDuringExecution(term)
	default:
		return corev1ac.PodAntiAffinity().WithPreferredDuringSchedulingIgnoredDuringExecution(
			corev1ac.WeightedPodAffinityTerm().WithWeight(100).WithPodAffinityTerm(term))
	}
}

// inherited is spec.inheritedMetadata's labels and annotations (nil maps
// when unset).
func inherited(db *v1alpha1.Database) (labels, annotations map[string]string) {
	if m := db.Spec.InheritedMetadata; m != nil {
		return m.Labels, m.Annotations
	}
	return nil, nil
}
