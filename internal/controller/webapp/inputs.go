package webapp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// referenceIndex indexes WebApps by the "Kind/name" of everything they reference.
const referenceIndex = "daytwo.dev/references"

// podInputs resolves what the pod template needs beyond the spec. missing
// names required references that do not exist, in a stable message; the
// rollout waits for them instead of starting pods that cannot start.
func (r *Reconciler) podInputs(ctx context.Context, app *v1alpha1.WebApp) (podInputs, string, error) {
	in := podInputs{}
	refs := configReferences(app)
	var missing []string
	if ref := app.Spec.DatabaseRef; ref != nil {
		db := &v1alpha1.Database{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: ref.Name}, db)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, kindDatabase+" "+ref.Name)
		case err != nil:
			return in, "", fmt.Errorf("failed to get Database %s: %w", ref.Name, err)
		case ref.Role != "" && !declaresLogin(db, ref.Role):
			missing = append(missing, "login role "+ref.Role+" in Database "+ref.Name+"'s spec.roles")
		case ref.Pooler && db.Spec.Pooler == nil:
			missing = append(missing, "spec.pooler in Database "+ref.Name)
		default:
			in.databaseSecret, in.databasePooler = ref.SecretName(), ref.Pooler
			in.databaseHold = databaseHold(db)
			refs = append(refs, reference{Kind: kindSecret, Name: in.databaseSecret})
		}
	}
	var versions []string
	for _, ref := range refs {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1GVK(ref.Kind))
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: ref.Name}, meta)
		switch {
		case apierrors.IsNotFound(err) && ref.Optional:
			versions = append(versions, ref.key()+"=absent")
		case apierrors.IsNotFound(err):
			missing = append(missing, ref.Kind+" "+ref.Name)
		case err != nil:
			return in, "", fmt.Errorf("failed to get %s %s: %w", ref.Kind, ref.Name, err)
		default:
			// The apiserver skips no-op writes, so resourceVersion moves only when content does.
			versions = append(versions, ref.key()+"="+string(meta.UID)+"/"+meta.ResourceVersion)
		}
	}
	if len(missing) > 0 {
		return in, "Waiting for " + strings.Join(missing, ", ") + " to exist", nil
	}
	in.configHash = hashOf(versions)
	return in, "", nil
}

// declaresLogin says db's spec.roles has role, present and with login.
func declaresLogin(db *v1alpha1.Database, role string) bool {
	for _, r := range db.Spec.Roles {
		if r.Name == role {
			return r.Login && r.Ensure != v1alpha1.RoleEnsureAbsent
		}
	}
	return false
}

// referrers maps a ConfigMap, Secret or Database to the WebApps in its
// namespace that reference it.
func (r *Reconciler) referrers(kind string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		return r.requestsFor(ctx, "reference an object", obj, client.InNamespace(obj.GetNamespace()),
			client.MatchingFields{referenceIndex: kind + "/" + obj.GetName()})
	}
}

// inNamespace maps a namespace to every WebApp in it.
func (r *Reconciler) inNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	if len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, ns.GetName()) {
		return nil // not watched: the cache holds none of its WebApps
	}
	return r.requestsFor(ctx, "are in a namespace", ns, client.InNamespace(ns.GetName()))
}

// requestsFor lists the WebApps opts select from the cache, for a map
// function woken by obj; an error is logged, and nothing is enqueued.
func (r *Reconciler) requestsFor(ctx context.Context, what string, obj client.Object, opts ...client.ListOption) []reconcile.Request {
	apps := &v1alpha1.WebAppList{}
	if err := r.Client.List(ctx, apps, opts...); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list the WebApps that "+what, "object", klog.KObj(obj))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(apps.Items))
	for _, a := range apps.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
	}
	return reqs
}

// corev1GVK is the GroupVersionKind of a core/v1 kind (ConfigMap, Secret).
func corev1GVK(kind string) schema.GroupVersionKind {
	return corev1.SchemeGroupVersion.WithKind(kind)
}
