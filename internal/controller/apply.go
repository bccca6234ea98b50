package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply server-side applies a child as daytwo's field manager, taking over
// fields other managers set (kubectl edits are drift to repair).
func Apply(ctx context.Context, c client.Client, obj runtime.ApplyConfiguration, what string) error {
	if err := c.Apply(ctx, obj, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply %s: %w", what, err)
	}
	return nil
}

// ApplyIfChanged applies desired unless the live object already holds exactly
// what daytwo last applied, field for field: extract reads daytwo's part of
// live from its managed fields. A resync of unchanged objects then writes
// nothing, while any edit to a field daytwo owns (which moves its ownership
// to the editor) makes the two differ and is repaired. live is filled in.
func ApplyIfChanged[O client.Object, AC runtime.ApplyConfiguration](ctx context.Context, c client.Client, live O, desired AC,
	extract func(O, string) (AC, error), what string) error {
	err := c.Get(ctx, client.ObjectKey{Namespace: live.GetNamespace(), Name: live.GetName()}, live)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to get %s: %w", what, err)
	}
	if err == nil {
		if current, err := extract(live, FieldOwner); err == nil && equality.Semantic.DeepEqual(current, desired) {
			return nil
		}
	}
	return Apply(ctx, c, desired, what)
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
