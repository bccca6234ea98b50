package operator

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// transform is every cached object's transform. A kind daytwo applies
// from the cache (controller.ApplyIfChanged) keeps the fingerprint of
// daytwo's part in place of its managed fields; any other object keeps
// daytwo's own managed-fields entry only. A Deployment also loses its pod
// template (the template's annotations and each container's image stay,
// among its own annotations), its labels and the selector daytwo gives
// every WebApp: the WebApp controller reads the full template from the API
// server in the rare moments it needs it (a rollback), and a template is
// most of a Deployment's size. A Service keeps its metadata only, without
// labels. A StatefulSet keeps daytwo's entry: the Database controller
// compares templates field by field (keepInstanceManager), and Databases
// are few. WebApps, Deployments and Services share the strings they repeat
// (compact.go), and the cache stores the two children as structs of only
// what is left of them (slim.go).
func transform(in any) (any, error) {
	switch o := in.(type) {
	case *cachedDeployment, *cachedService:
		return in, nil // the cache's copy already
	case *appsv1.Deployment:
		return slimDeploymentOf(transformDeployment(o, nil)), nil
	case *corev1.Service:
		dropCacheAnnotations(o.Annotations)
		fingerprint(o, corev1ac.ExtractService)
		// No controller reads a Service beyond its metadata: whether it
		// exists, who controls it and the fingerprint of daytwo's part.
		compactService(o)
		return &cachedService{ObjectMeta: o.ObjectMeta}, nil
	case *v1alpha1.WebApp:
		if _, err := keepOwnManagedFields(in); err != nil {
			return nil, err
		}
		compactWebApp(o)
	case *corev1.ServiceAccount:
		fingerprint(o, corev1ac.ExtractServiceAccount)
	case *autoscalingv2.HorizontalPodAutoscaler:
		fingerprint(o, autoscalingv2ac.ExtractHorizontalPodAutoscaler)
	case *policyv1.PodDisruptionBudget:
		fingerprint(o, policyv1ac.ExtractPodDisruptionBudget)
	case *networkingv1.Ingress:
		fingerprint(o, networkingv1ac.ExtractIngress)
	case *rbacv1.Role:
		fingerprint(o, rbacv1ac.ExtractRole)
	case *rbacv1.RoleBinding:
		fingerprint(o, rbacv1ac.ExtractRoleBinding)
	default:
		return keepOwnManagedFields(in)
	}
	return in, nil
}

// transformDeployment slims d for the cache, in place; previous is the
// cache's copy it replaces, when known (fingerprintDeployment).
func transformDeployment(d *appsv1.Deployment, previous metav1.Object) *appsv1.Deployment {
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return d // slimmed already (the API server requires a container): only tests hand one back
	}
	dropCacheAnnotations(d.Annotations)
	fingerprintDeployment(d, previous)
	slimDeployment(d)
	return d
}

// fingerprint replaces obj's managed fields with the fingerprint of what
// daytwo's entry covers, when it has one.
func fingerprint[O metav1.Object, AC any](obj O, extract func(O, string) (AC, error)) {
	// The informer may hand an object it already transformed back to the
	// transform (a resync): with no managed fields left, it is done.
	if len(obj.GetManagedFields()) == 0 {
		return
	}
	// Only the cache sets its annotations: one the server holds (a
	// user's) must not pass for daytwo's part.
	dropCacheAnnotations(obj.GetAnnotations())
	owned := slices.ContainsFunc(obj.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == controller.FieldOwner && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
	})
	if owned {
		if ac, err := extract(obj, controller.FieldOwner); err == nil {
			a := obj.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[controller.CachedOwnedFingerprint] = controller.Fingerprint(ac)
			obj.SetAnnotations(a)
		}
	}
	obj.SetManagedFields(nil)
}

// slimDeployment keeps of a pod template its annotations (the template
// hash) and each container's image, and of the status conditions all but
// their messages, which no controller reads.
func slimDeployment(d *appsv1.Deployment) {
	for i := range d.Status.Conditions {
		d.Status.Conditions[i].Message = ""
	}
	compactDeployment(d)
}

func keepOwnManagedFields(in any) (any, error) {
	obj, ok := in.(metav1.Object)
	if !ok {
		return in, nil
	}
	if mf := obj.GetManagedFields(); len(mf) > 0 {
		mf = slices.DeleteFunc(mf, func(e metav1.ManagedFieldsEntry) bool {
			return e.Manager != controller.FieldOwner || e.Subresource != ""
		})
		switch {
		case len(mf) == 0:
			mf = nil // and the backing array goes with the filtered entries
		case len(mf) < cap(mf):
			mf = slices.Clone(mf)
		}
		obj.SetManagedFields(mf)
	}
	return in, nil
}
