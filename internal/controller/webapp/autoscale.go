package webapp

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// seedReplicas gives an autoscaled WebApp its first spec.replicas, through
// its scale subresource: the HorizontalPodAutoscaler targets the WebApp,
// and reads a target without a replica count as one it must not scale. The
// seed is what runs (an app whose HPA scaled its Deployment before keeps
// its pods), or minReplicas for a new app. From then on the HPA writes it.
func (r *Reconciler) seedReplicas(ctx context.Context, app *v1alpha1.WebApp, live *appsv1.Deployment, exists bool) error {
	a := app.Spec.Autoscaling
	if a == nil || app.Spec.Replicas != nil {
		return nil
	}
	n := max(a.MinReplicas, 1)
	if exists && live.Spec.Replicas != nil {
		n = min(max(*live.Spec.Replicas, n), a.MaxReplicas)
	}
	// At the WebApp's resourceVersion: from a stale cache, the seed fails
	// (and the reconcile retries) rather than overwrite the HPA's count.
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Name,
		ResourceVersion: app.ResourceVersion}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	if err := r.Client.SubResource("scale").Update(ctx, app.DeepCopy(), client.WithSubResourceBody(scale)); apierrors.IsConflict(err) {
		return nil // the WebApp changed since the cache saw it: its event brings the next reconcile
	} else if err != nil {
		return fmt.Errorf("failed to set the first replica count of the autoscaled WebApp: %w", err)
	}
	app.Spec.Replicas = ptr.To(n)
	return nil
}
