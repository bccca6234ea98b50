package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// FieldOwner is daytwo's server-side apply field manager.
const FieldOwner = "daytwo"

// PatchStatus writes obj's status once, and only when it differs from the
// snapshot taken at the start of the reconcile. A merge patch against the
// snapshot sends just the changed fields and never a stale resourceVersion.
func PatchStatus(ctx context.Context, c client.Client, before, obj client.Object, beforeStatus, afterStatus any) error {
	if equality.Semantic.DeepEqual(beforeStatus, afterStatus) {
		return nil
	}
	// NotFound: the object is gone (its last finalizer was just removed).
	if err := c.Status().Patch(ctx, obj, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to patch status: %w", err)
	}
	logf.FromContext(ctx).V(1).Info("Status written")
	return nil
}

// WriteStatus ends a reconcile: it writes the status (see PatchStatus) and
// joins the outcome to the reconcile's err. Refusals because the namespace
// is being deleted are dropped: the object goes with the namespace.
func WriteStatus(ctx context.Context, c client.Client, before, obj client.Object, beforeStatus, afterStatus any, err error) error {
	err = errors.Join(err, PatchStatus(ctx, c, before, obj, beforeStatus, afterStatus))
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return nil
	}
	return err
}

// Truncate shortens a message for a condition or an Event to n bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// WithMemoryLimit returns a copy of r in which a memory request without a
// memory limit also sets the limit: every container daytwo creates is
// bounded, and a database or app whose limit equals its request is not the
// first to be killed when its node runs short.
func WithMemoryLimit(r *corev1.ResourceRequirements) *corev1.ResourceRequirements {
	out := r.DeepCopy()
	req, ok := out.Requests[corev1.ResourceMemory]
	if _, limited := out.Limits[corev1.ResourceMemory]; !ok || limited {
		return out
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	out.Limits[corev1.ResourceMemory] = req
	return out
}

// ObservedGeneration is the status.observedGeneration a reconcile of
// generation gen that returned err leaves: gen once it succeeded (or
// ended for good, a terminal error: the status says why), else the
// generation the status described before.
func ObservedGeneration(before, gen int64, err error) int64 {
	if err == nil || errors.Is(err, reconcile.TerminalError(nil)) {
		return gen
	}
	return before
}
