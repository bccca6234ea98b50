//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// The operator pod is killed again and again while 20 WebApps are created and
// changed. Everything converges, with exactly one Deployment and one Service
// per app, each controlled by its app.
func TestWebAppsConvergeThroughOperatorRestarts(t *testing.T) {
	requireRealNode(t)
	ns := cluster.Namespace(t)
	ctx := context.Background()
	const n = 20

	var wg sync.WaitGroup
	wg.Add(1)
	kills := 0
	go func() {
		defer wg.Done()
		for i := range 5 {
			time.Sleep(3 * time.Second)
			pods := &corev1.PodList{}
			if err := cluster.Client.List(ctx, pods, client.InNamespace(framework.OperatorNamespace),
				client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
				continue
			}
			for _, p := range pods.Items {
				// Alternate a graceful stop with a kill that leaves the leader lease behind.
				grace := int64(0)
				if i%2 == 0 {
					grace = 5
				}
				if cluster.Client.Delete(ctx, &p, client.GracePeriodSeconds(grace)) == nil {
					kills++
				}
			}
		}
	}()

	apps := make([]*v1alpha1.WebApp, n)
	for i := range n {
		apps[i] = demoApp(ns, fmt.Sprintf("r%02d", i), 1)
		apps[i].Spec.Replicas = ptr.To[int32](0) // pods are not what this suite is about
		if err := cluster.Client.Create(ctx, apps[i]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for i, a := range apps {
		updateApp(t, a, func(a *v1alpha1.WebApp) {
			a.Spec.Image = demoWebImageV2
			a.Spec.Replicas = ptr.To[int32](int32(i % 2))
		})
		time.Sleep(300 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("killed the operator pod %d times", kills)

	for i, a := range apps {
		want := int32(i % 2)
		waitApp(t, a, 4*time.Minute, "converged", func(a *v1alpha1.WebApp) bool {
			return meta.IsStatusConditionTrue(a.Status.Conditions, v1alpha1.ConditionReady) && a.Status.AvailableReplicas == want &&
				(want == 0 || a.Status.CurrentImage == demoWebImageV2)
		})
	}
	deps := &appsv1.DeploymentList{}
	svcs := &corev1.ServiceList{}
	for _, l := range []client.ObjectList{deps, svcs} {
		if err := cluster.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	if len(deps.Items) != n || len(svcs.Items) != n {
		t.Fatalf("%d Deployments and %d Services for %d WebApps", len(deps.Items), len(svcs.Items), n)
	}
	owners := map[string]int{}
	for _, o := range append(objectsOf(deps), objectsOf(svcs)...) {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != "WebApp" || ref.Name != o.GetName() {
			t.Errorf("%s has controller %v, want WebApp %s", o.GetName(), ref, o.GetName())
			continue
		}
		owners[ref.Name]++
	}
	for _, a := range apps {
		if owners[a.Name] != 2 {
			t.Errorf("WebApp %s controls %d children, want a Deployment and a Service", a.Name, owners[a.Name])
		}
		d := &appsv1.Deployment{}
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(a), d); err != nil || d.Spec.Template.Spec.Containers[0].Image != demoWebImageV2 {
			t.Errorf("Deployment %s image: %v %v", a.Name, err, d.Spec.Template.Spec.Containers)
		}
	}
}

func objectsOf(l client.ObjectList) []client.Object {
	var out []client.Object
	switch l := l.(type) {
	case *appsv1.DeploymentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}
