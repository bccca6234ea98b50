package webapp

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// reconcileDelete disconnects an app with deletionPolicy Orphan: its children
// lose their owner reference, so garbage collection leaves them running.
// With deletionPolicy Delete there is no finalizer and garbage collection
// removes the children.
func (r *Reconciler) reconcileDelete(ctx context.Context, app *v1alpha1.WebApp) error {
	r.applied.Delete(client.ObjectKeyFromObject(app))
	if !controllerutil.ContainsFinalizer(app, orphanFinalizer) {
		return nil
	}
	children := []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &autoscalingv2.HorizontalPodAutoscaler{},
		&policyv1.PodDisruptionBudget{}, &networkingv1.Ingress{}}
	for _, obj := range children {
		if err := r.releaseChild(ctx, app, obj); err != nil {
			return err
		}
	}
	controller.Event(ctx, r.Recorder, app, nil, corev1.EventTypeNormal, "Orphaned", "Orphan", "Left the children of %s running without an owner", app.Name)
	base := app.DeepCopy()
	controllerutil.RemoveFinalizer(app, orphanFinalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, app, client.MergeFrom(base)))
}

// releaseChild removes app's owner reference from its child of obj's type.
func (r *Reconciler) releaseChild(ctx context.Context, app *v1alpha1.WebApp, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(app), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	refs := obj.GetOwnerReferences()
	kept := slices.DeleteFunc(slices.Clone(refs), func(o metav1.OwnerReference) bool { return o.UID == app.UID })
	if len(kept) == len(refs) {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	obj.SetOwnerReferences(kept)
	if err := r.Client.Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("failed to release %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}
