package database_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A Database placed on a tainted node pool, with required anti-affinity,
// its own spread, inherited metadata and a LoadBalancer -rw Service: the
// instances, the pools, the ServiceAccount and the Services all carry it.
func TestPlacementShapesThePods(t *testing.T) {
	ns := env.Namespace(t)
	pool := map[string]string{"pool": "db"}
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
	create(t, newDB(ns, "placed", func(db *v1alpha1.Database) {
		db.Spec.Placement = &v1alpha1.DatabasePlacement{
			Placement: v1alpha1.Placement{NodeSelector: pool, Tolerations: []corev1.Toleration{toleration}, PriorityClassName: "databases",
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}},
			AntiAffinity: v1alpha1.AntiAffinityRequired,
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
				WhenUnsatisfiable: corev1.DoNotSchedule}},
		}
		db.Spec.InheritedMetadata = &v1alpha1.PodMetadata{Labels: map[string]string{"team": "payments"},
			Annotations: map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/backups"}}
		db.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		db.Spec.Services = &v1alpha1.DatabaseServices{ReadWrite: &v1alpha1.ServiceTemplate{Type: corev1.ServiceTypeLoadBalancer,
			Annotations:              map[string]string{"service.beta.kubernetes.io/aws-load-balancer-internal": "true"},
			LoadBalancerSourceRanges: []string{"10.0.0.0/8"}}}
		db.Spec.Pooler = &v1alpha1.PoolerSpec{}
	}))
	sts := waitStatefulSet(t, ns, "placed")
	pod := sts.Spec.Template
	aff := pod.Spec.Affinity
	switch {
	case pod.Spec.NodeSelector["pool"] != "db" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0] != toleration ||
		pod.Spec.PriorityClassName != "databases" || len(pod.Spec.ImagePullSecrets) != 1:
		t.Errorf("the instances' pool: nodeSelector %v, tolerations %v, priority %q, pull Secrets %v",
			pod.Spec.NodeSelector, pod.Spec.Tolerations, pod.Spec.PriorityClassName, pod.Spec.ImagePullSecrets)
	case aff == nil || aff.NodeAffinity == nil || aff.PodAntiAffinity == nil ||
		len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 0:
		t.Errorf("the instances' affinity: %+v", aff)
	case len(pod.Spec.TopologySpreadConstraints) != 1 || pod.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.DoNotSchedule ||
		pod.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels["daytwo.dev/database"] != "placed":
		t.Errorf("the instances' spread: %+v", pod.Spec.TopologySpreadConstraints)
	case pod.Labels["team"] != "payments" || pod.Labels["daytwo.dev/database"] != "placed" ||
		pod.Annotations["eks.amazonaws.com/role-arn"] == "":
		t.Errorf("the instances' metadata: labels %v, annotations %v", pod.Labels, pod.Annotations)
	}
	eventually(t, "the ServiceAccount, the -rw Service and the pool", func() (bool, error) {
		sa, err := get(ns, "placed-instance", &corev1.ServiceAccount{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		if sa.Annotations["eks.amazonaws.com/role-arn"] == "" || sa.Labels["team"] != "payments" {
			t.Fatalf("the ServiceAccount's metadata: labels %v, annotations %v", sa.Labels, sa.Annotations)
		}
		rw, err := get(ns, "placed-rw", &corev1.Service{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		if rw.Spec.Type != corev1.ServiceTypeLoadBalancer || rw.Annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] != "true" ||
			strings.Join(rw.Spec.LoadBalancerSourceRanges, ",") != "10.0.0.0/8" {
			t.Fatalf("the -rw Service: type %s, annotations %v, ranges %v", rw.Spec.Type, rw.Annotations, rw.Spec.LoadBalancerSourceRanges)
		}
		if ro, err := get(ns, "placed-ro", &corev1.Service{}); err != nil || ro.Spec.Type != corev1.ServiceTypeClusterIP {
			return false, ignoreNotFound(err)
		}
		pooler, err := get(ns, "placed-pooler-rw", &appsv1.Deployment{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		ps := pooler.Spec.Template
		if ps.Spec.NodeSelector["pool"] != "db" || len(ps.Spec.Tolerations) != 1 || ps.Labels["team"] != "payments" ||
			len(ps.Spec.ImagePullSecrets) != 1 || len(ps.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Fatalf("the pool's pods: nodeSelector %v, tolerations %v, labels %v", ps.Spec.NodeSelector, ps.Spec.Tolerations, ps.Labels)
		}
		return true, nil
	})
	// A label of daytwo's own is refused, naming the field.
	err := env.Client.Create(ctx, newDB(ns, "bad-label", func(db *v1alpha1.Database) {
		db.Spec.InheritedMetadata = &v1alpha1.PodMetadata{Labels: map[string]string{"daytwo.dev/role": "primary"}}
	}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.inheritedMetadata.labels") {
		t.Errorf("a daytwo.dev/ label: %v, want Invalid naming spec.inheritedMetadata.labels", err)
	}
	err = env.Client.Create(ctx, newDB(ns, "bad-ranges", func(db *v1alpha1.Database) {
		db.Spec.Services = &v1alpha1.DatabaseServices{ReadOnly: &v1alpha1.ServiceTemplate{LoadBalancerSourceRanges: []string{"10.0.0.0/8"}}}
	}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.services.readOnly") {
		t.Errorf("source ranges on a ClusterIP Service: %v, want Invalid naming spec.services.readOnly", err)
	}
}
