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

// Three instances of a Database land on three nodes, by the operator's
// default anti-affinity and zone spread, with the real scheduler. kwok
// only: the real node is a single node.
func TestInstancesSpreadAcrossNodes(t *testing.T) {
	if cluster.Mode != framework.ModeKwok {
		t.Skip("needs several nodes: the real node is one; CI runs this on kwok nodes")
	}
	ctx := context.Background()
	// Three more simulated nodes, one per zone, so the cluster has room for
	// every instance on its own node whatever else runs there.
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		name := fmt.Sprintf("placement-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"type": "kwok", corev1.LabelHostname: name, corev1.LabelTopologyZone: zone,
					corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}},
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
	for i := range 3 {
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
	distinct := map[string]bool{}
	for _, n := range nodes {
		distinct[n] = true
	}
	if len(distinct) != 3 {
		t.Fatalf("3 instances on %d nodes: %v", len(distinct), nodes)
	}
	t.Logf("instances by node: %v", nodes)
}
