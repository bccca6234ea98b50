//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// Three instances of a Database placed on a tainted database pool land
// only there, one per zone, with the real scheduler: four pool nodes (two
// in zone-a) and the cluster's other nodes, none tainted, to tempt it.
// kwok only: the real node is a single node.
func TestInstancesLandOnTheirPoolAcrossZones(t *testing.T) {
	if cluster.Mode != framework.ModeKwok {
		t.Skip("needs several nodes: the real node is one; CI runs this on kwok nodes")
	}
	ctx := context.Background()
	zones := []string{"zone-a", "zone-a", "zone-b", "zone-c"}
	for i, zone := range zones {
		name := fmt.Sprintf("placement-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"type": "kwok", "pool": "db", corev1.LabelHostname: name, corev1.LabelTopologyZone: zone,
					corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"),
					corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"),
					corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
			},
		}
		if err := cluster.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), node) })
	}
	// kwok has no storage provisioner: volumes for the claims to bind to.
	for i := range zones {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("placement-%d", i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: fmt.Sprintf("/tmp/placement-%d", i)}},
			},
		}
		if err := cluster.Client.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), pv) })
	}
	ns := cluster.Namespace(t)
	createDatabase(t, ns, "spread", func(db *v1alpha1.Database) {
		db.Spec.Instances = ptr.To[int32](3)
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
		db.Spec.Placement = &v1alpha1.DatabasePlacement{
			Placement: v1alpha1.Placement{NodeSelector: map[string]string{"pool": "db"},
				Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}}},
			AntiAffinity: v1alpha1.AntiAffinityRequired,
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
				WhenUnsatisfiable: corev1.DoNotSchedule}},
		}
	})
	nodes := map[string]string{}
	framework.Eventually(t, 2*time.Minute, "3 instances scheduled", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := cluster.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"daytwo.dev/database": "spread"}); err != nil {
			return false, err
		}
		clear(nodes)
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				nodes[p.Name] = p.Spec.NodeName
			}
		}
		return len(nodes) == 3, nil
	})
	byZone := map[string]string{}
	for pod, name := range nodes {
		node := &corev1.Node{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		if node.Labels["pool"] != "db" {
			t.Fatalf("%s runs on %s, outside the database pool", pod, name)
		}
		byZone[node.Labels[corev1.LabelTopologyZone]] = pod
	}
	if len(byZone) != 3 {
		t.Fatalf("3 instances in %d zones: %v", len(byZone), nodes)
	}
	t.Logf("instances by node: %v", nodes)
}
