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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
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

	// killed holds the operator pods deleted while their container ran;
	// stops counts them by how they were stopped.
	var wg sync.WaitGroup
	wg.Add(1)
	killed := sets.New[types.UID]()
	stops := map[string]int{}
	var listErr error
	go func() {
		defer wg.Done()
		for i := range 5 {
			time.Sleep(3 * time.Second)
			pods := &corev1.PodList{}
			if err := cluster.Client.List(ctx, pods, client.InNamespace(framework.OperatorNamespace),
				client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
				listErr = err
				continue
			}
			for _, p := range pods.Items {
				// Alternate a graceful stop with a kill that leaves the leader lease behind.
				grace, how := int64(0), "killed"
				if i%2 == 0 {
					grace, how = 5, "stopped"
				}
				running := p.DeletionTimestamp.IsZero() && operatorRunning(p)
				if cluster.Client.Delete(ctx, &p, client.GracePeriodSeconds(grace)) == nil && running {
					killed.Insert(p.UID)
					stops[how]++
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
	if stops["stopped"] == 0 || stops["killed"] == 0 {
		t.Fatalf("running operator pods stopped gracefully %d times and killed %d times, want both (last list error: %v)",
			stops["stopped"], stops["killed"], listErr)
	}
	t.Logf("running operator pods stopped gracefully %d times and killed %d times", stops["stopped"], stops["killed"])
	// What converges below is the work of operators started after the kills:
	// every killed pod is gone and a new one is ready.
	framework.Eventually(t, 2*time.Minute, "the killed operator pods gone and a new one ready", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := cluster.Client.List(ctx, pods, client.InNamespace(framework.OperatorNamespace),
			client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
			return false, err
		}
		fresh := false
		for _, p := range pods.Items {
			if killed.Has(p.UID) {
				return false, nil
			}
			fresh = fresh || podReady(p)
		}
		return fresh, nil
	})

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

// operatorRunning reports whether p's operator container has started and not stopped.
func operatorRunning(p corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "operator" {
			return c.State.Running != nil
		}
	}
	return false
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
