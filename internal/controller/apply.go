package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Apply server-side applies a child as daytwo's field manager, taking over
// fields other managers set (kubectl edits are drift to repair).
func Apply(ctx context.Context, c client.Client, obj runtime.ApplyConfiguration, what string) error {
	if err := c.Apply(ctx, obj, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply %s: %w", what, err)
	}
	logf.FromContext(ctx).V(1).Info("Applied", "child", what)
	return nil
}

// ApplyIfChanged applies desired unless the live object already holds exactly
// what daytwo last applied, field for field: extract reads daytwo's part of
// live from its managed fields. A resync of unchanged objects then writes
// nothing, while any edit to a field daytwo owns (which moves its ownership
// to the editor) makes the two differ and is repaired. live is filled in.
func ApplyIfChanged[O client.Object, AC runtime.ApplyConfiguration](ctx context.Context, c client.Client, live O, desired AC,
	extract func(O, string) (AC, error), what string) error {
	return ApplyIfChangedReading(ctx, c, c, live, desired, extract, what)
}

// ApplyIfChangedReading is ApplyIfChanged reading live through reader: the
// API server, for a kind the operator caches only as metadata.
func ApplyIfChangedReading[O client.Object, AC runtime.ApplyConfiguration](ctx context.Context, reader client.Reader, c client.Client,
	live O, desired AC, extract func(O, string) (AC, error), what string) error {
	err := reader.Get(ctx, client.ObjectKey{Namespace: live.GetNamespace(), Name: live.GetName()}, live)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to get %s: %w", what, err)
	}
	if err == nil && Unchanged(live, desired, extract) {
		return nil
	}
	return Apply(ctx, c, desired, what)
}

// Unchanged is true when live holds exactly what daytwo would apply as
// desired (see ApplyIfChanged). A cached child carries the fingerprint of
// daytwo's part instead of its managed fields (CachedOwnedFingerprint); an
// object read from the API server is extracted and compared.
func Unchanged[O client.Object, AC runtime.ApplyConfiguration](live O, desired AC, extract func(O, string) (AC, error)) bool {
	if v, ok := live.GetAnnotations()[CachedOwnedFingerprint]; ok {
		fp, _, _ := strings.Cut(v, "/") // after the slash, what it was taken from
		return fp == Fingerprint(desired)
	}
	current, err := extract(live, FieldOwner)
	return err == nil && equality.Semantic.DeepEqual(current, desired)
}

// CachedOwnedFingerprint is an annotation only the informer cache's copy
// of a child carries, never the API server's: the Fingerprint of what
// daytwo's managed-fields entry covers, taken when the watch delivered the
// object (see operator.CacheOptions). The cache then drops the managed
// fields, which are often the largest part of a child.
const CachedOwnedFingerprint = CachePrefix + "owned-fingerprint"

// CachePrefix begins every annotation only the informer cache's copies
// carry; the cache drops any the server holds.
const CachePrefix = "cache.daytwo.dev/"

// The cache's copy of a Deployment keeps no pod template, only its
// annotations and each container's image, among the Deployment's own
// annotations: CachedTemplatePrefix and the template annotation's key,
// CachedImagePrefix and the container's name.
const (
	CachedTemplatePrefix = CachePrefix + "template."
	CachedImagePrefix    = CachePrefix + "image."
)

// Fingerprint identifies an apply configuration by content: two that are
// equal field for field marshal to the same JSON (map keys sorted, lists
// in order, quantities in canonical form).
func Fingerprint(ac any) string {
	raw, err := json.Marshal(ac)
	if err != nil {
		return "unmarshalable: " + err.Error() // equal to no fingerprint of a real object
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16])
}

// Named returns an empty object of type T with a namespace and name, for
// Get, Delete and ApplyIfChanged.
func Named[T any, PT interface {
	*T
	client.Object
}](namespace, name string) PT {
	obj := PT(new(T))
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

// Ownership is how a child of the name daytwo would use relates to owner.
type Ownership int

const (
	// Absent means no such object: daytwo creates it.
	Absent Ownership = iota
	// Owned means owner controls it.
	Owned
	// Adoptable means nothing controls it and the owner asks for adoption.
	Adoptable
	// Conflicting means someone else controls it, or nothing does and adoption
	// was not asked for; daytwo must not write or delete it.
	Conflicting
)

// ManagedByLabel and ManagedBy mark every child daytwo makes. The cache
// holds Deployments and Services only with them (CachedOnlyWhenOurs).
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "daytwo"
)

// CachedOnlyWhenOurs says whether the informer cache holds obj's kind only
// when daytwo manages the object: a cluster has many Deployments and
// Services of its own, and daytwo reads only its children's. Absent from
// the cache is then not absent from the cluster.
func CachedOnlyWhenOurs(obj client.Object) bool {
	switch obj.(type) {
	case *appsv1.Deployment, *corev1.Service:
		return true
	}
	return false
}

// CheckOwner gets obj (namespace and name set) and says whether daytwo may
// write it for owner, a ownerKind. kind names obj in the message that
// explains a conflict. An object of a kind the cache holds only when daytwo
// manages it is looked for through api when the cache has none, so an
// object of the same name that someone else made is not overwritten.
func CheckOwner(ctx context.Context, c client.Client, api client.Reader, owner client.Object, ownerKind string, obj client.Object, kind string) (Ownership, string, error) {
	key := client.ObjectKeyFromObject(obj)
	err := c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && CachedOnlyWhenOurs(obj) {
		err = api.Get(ctx, key, obj)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Absent, "", nil
		}
		return Conflicting, "", fmt.Errorf("failed to get %s %s: %w", kind, key.Name, err)
	}
	ctrl := metav1.GetControllerOf(obj)
	switch {
	case ctrl != nil && ctrl.UID == owner.GetUID():
		return Owned, "", nil
	case ctrl == nil && owner.GetAnnotations()[v1alpha1.AnnotationAdopt] == "true":
		return Adoptable, "", nil
	case ctrl != nil:
		return Conflicting, fmt.Sprintf("%s %s is controlled by %s %s", kind, obj.GetName(), ctrl.Kind, ctrl.Name), nil
	default:
		return Conflicting, fmt.Sprintf("%s %s exists and is not managed by daytwo; annotate the %s with %s=true to adopt it",
			kind, obj.GetName(), ownerKind, v1alpha1.AnnotationAdopt), nil
	}
}

// DeleteOwned deletes obj (namespace and name set) only if owner controls it.
func DeleteOwned(ctx context.Context, c client.Client, owner, obj client.Object, kind string) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ctrl := metav1.GetControllerOf(obj); ctrl == nil || ctrl.UID != owner.GetUID() {
		return nil
	}
	if err := c.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete %s %s: %w", kind, obj.GetName(), err)
	}
	logf.FromContext(ctx).V(1).Info("Deleted", "kind", kind, "child", obj.GetName())
	return nil
}
