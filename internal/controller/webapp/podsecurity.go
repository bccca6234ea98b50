package webapp

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/daytwo-dev/daytwo/internal/controller"
)

// podSecurityEvaluator runs the checks of the Pod Security Admission
// controller itself, so daytwo refuses exactly what the API server would.
var podSecurityEvaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("pod security checks: %v", err)) // the library's own checks are valid
	}
	return e
}()

// podSecurityViolation says why template breaks the Pod Security level its
// namespace enforces, or "" when it does not. The namespace's labels come
// from the metadata cache. A template the API server would refuse is not
// applied: the ReplicaSet would only fail to create pods, which no one sees.
func (r *Reconciler) podSecurityViolation(ctx context.Context, ns string, template *corev1ac.PodTemplateSpecApplyConfiguration) (string, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Client.Get(ctx, client.ObjectKey{Name: ns}, meta); err != nil {
		return "", fmt.Errorf("failed to read namespace %s for its Pod Security level: %w", ns, err)
	}
	return podSecurity(ns, meta.Labels, controller.ApplyConfig[corev1.PodTemplateSpec](template)), nil
}

// podSecurity evaluates t against the enforce level of a namespace with
// these labels. Without the label the level is privileged: the API server
// may have a cluster-wide default daytwo cannot read, and then the
// ReplicaSet's FailedCreate events are all there is.
func podSecurity(ns string, labels map[string]string, t *corev1.PodTemplateSpec) string {
	latest := psapi.LevelVersion{Level: psapi.LevelPrivileged, Version: psapi.LatestVersion()}
	// Invalid labels evaluate as restricted, as the admission controller does.
	p, _ := psapi.PolicyToEvaluate(labels, psapi.Policy{Enforce: latest, Audit: latest, Warn: latest})
	if p.Enforce.Level == psapi.LevelPrivileged {
		return ""
	}
	res := policy.AggregateCheckResults(podSecurityEvaluator.EvaluatePod(p.Enforce, &t.ObjectMeta, &t.Spec))
	if res.Allowed {
		return ""
	}
	return fmt.Sprintf("The pod template violates PodSecurity %q, which namespace %s enforces: %s. "+
		"Change spec.securityContext or spec.podSecurityContext, or the namespace's %s label",
		p.Enforce.String(), ns, res.ForbiddenDetail(), psapi.EnforceLevelLabel)
}

// podSecurityLabelsChanged passes the namespace updates that change a Pod
// Security label: only those can change what podSecurity decides.
var podSecurityLabelsChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return podSecurityLabels(e.ObjectOld.GetLabels()) != podSecurityLabels(e.ObjectNew.GetLabels())
	},
}

func podSecurityLabels(labels map[string]string) string {
	var b strings.Builder
	for _, k := range []string{psapi.EnforceLevelLabel, psapi.EnforceVersionLabel} {
		b.WriteString(k + "=" + labels[k] + ";")
	}
	return b.String()
}
