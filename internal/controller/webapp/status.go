package webapp

import (
	"cmp"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
)

// rollout is what applyDeployment saw and did.
type rollout struct {
	deployment       *appsv1.Deployment
	desiredImage     string
	failedHash       string
	deadlineExceeded bool
	// restoredImage is the image of the template a rollback applied: the
	// Deployment read back right after the apply may still be the cache's
	// older copy, which names the failed image.
	restoredImage string
	// forbidden says why the spec's template breaks the namespace's Pod
	// Security level; the live template, if any, was kept.
	forbidden string
	// abortSignal is the signal that aborted the canary of the failed revision.
	abortSignal string
	// canary is where a running canary stands, if one runs.
	canary *canaryReport
	// databaseHold says why the rollout is paused, if it is.
	databaseHold string
}

// rolledBack reports whether the applied template is the previous revision's
// because the spec's own revision failed.
func (r rollout) rolledBack() bool { return r.failedHash != "" }

// observation is everything the status is rebuilt from in one reconcile.
type observation struct {
	selector map[string]string
	missing  string
	conflict string
	rollout  rollout
	// problem is what keeps pods from running, when the rollout is stuck.
	problem *podProblem
}

// maxMessage bounds a condition message that quotes the kubelet, the
// scheduler, Pod Security or a container (the API allows 32 KiB).
const maxMessage = 2048

// setStatus rebuilds app's status from obs. It is pure: same inputs, same status.
func setStatus(app *v1alpha1.WebApp, obs observation) {
	s := &app.Status
	gen := app.Generation
	s.ObservedGeneration = gen
	s.Canary = nil
	sel := obs.selector
	if sel == nil {
		sel = selectorLabels(app)
	}
	// The scale subresource's selector (the HorizontalPodAutoscaler's):
	// the stable pods, not a canary's.
	s.Selector = metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: sel, MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: labelTrack, Operator: metav1.LabelSelectorOpNotIn, Values: []string{trackCanary}}}})
	s.ServiceURL = fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", app.Name, app.Namespace, app.Spec.Port)
	s.URL = s.ServiceURL
	if in := app.Spec.Ingress; in != nil {
		s.URL = ingressURL(in)
	}
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		conditions.Set(&s.Conditions, gen, typ, status, reason, msg)
	}
	switch {
	case obs.missing != "":
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonMissingReference, obs.missing)
		return
	case obs.conflict != "":
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonConflictingResource, obs.conflict)
		return
	case obs.rollout.deployment == nil && obs.rollout.forbidden != "":
		msg := controller.Truncate(obs.rollout.forbidden, maxMessage)
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonPodSecurityViolation, msg)
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonPodSecurityViolation, msg)
		set(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonPodSecurityViolation, msg)
		return
	case obs.rollout.deployment == nil:
		return
	}
	d := obs.rollout.deployment
	desired := ptr.Deref(d.Spec.Replicas, 1)
	s.Replicas, s.AvailableReplicas = d.Status.Replicas, d.Status.AvailableReplicas
	complete := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == desired &&
		d.Status.Replicas == desired && d.Status.AvailableReplicas == desired
	if complete {
		s.CurrentImage = templateImage(d)
	}

	available := d.Status.AvailableReplicas >= desired && desired > 0 || desired == 0
	count := fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, desired)
	switch {
	case available:
		set(v1alpha1.ConditionReady, true, v1alpha1.ReasonAvailable, count)
	case obs.problem != nil:
		set(v1alpha1.ConditionReady, false, obs.problem.reason, controller.Truncate(count+". "+obs.problem.message, maxMessage))
	default:
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonReconciling, count)
	}

	ro := obs.rollout
	switch {
	case ro.forbidden != "":
		msg := controller.Truncate(ro.forbidden, maxMessage)
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonPodSecurityViolation, msg)
		set(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonPodSecurityViolation, msg)
		return
	case ro.rolledBack() && ro.abortSignal != "":
		stable := cmp.Or(ro.restoredImage, templateImage(d))
		msg := controller.Truncate(fmt.Sprintf("Canary of image %s aborted; the stable pods keep %s. %s", ro.desiredImage, stable, ro.abortSignal), maxMessage)
		s.Canary = &v1alpha1.WebAppCanaryStatus{CanaryImage: ro.desiredImage, StableImage: stable,
			StableReplicas: ptr.Deref(d.Spec.Replicas, 1), StableWeight: 100, Message: controller.Truncate(ro.abortSignal, maxMessage)}
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonCanaryAborted, msg)
		set(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonCanaryAborted, msg)
		return
	case ro.rolledBack():
		msg := fmt.Sprintf("Image %s missed its progress deadline; rolled back to %s", ro.desiredImage, cmp.Or(ro.restoredImage, templateImage(d)))
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolledBack, msg)
		set(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonRolledBack, msg)
		return
	case ro.databaseHold != "":
		if ro.canary != nil {
			s.Canary = canaryStatus(ro.canary, d)
		}
		set(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonDatabaseUnavailable, "Rollout of image "+ro.desiredImage+" paused: "+ro.databaseHold)
	case ro.canary != nil:
		s.Canary = canaryStatus(ro.canary, d)
		set(v1alpha1.ConditionProgressing, ro.canary.reason != v1alpha1.ReasonConflictingResource, ro.canary.reason,
			controller.Truncate(ro.canary.message, maxMessage))
	case ro.deadlineExceeded:
		msg := fmt.Sprintf("Image %s missed its progress deadline and there is no earlier revision to roll back to", ro.desiredImage)
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonProgressDeadlineExceeded, msg)
		set(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonProgressDeadlineExceeded, msg)
		return
	case !complete:
		set(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonRollingOut, "Rolling out image "+ro.desiredImage)
	default:
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolloutComplete, "Image "+ro.desiredImage+" is rolled out")
	}
	switch {
	case obs.problem != nil:
		// A new revision's pods failing beside available old ones, too.
		set(v1alpha1.ConditionDegraded, true, obs.problem.reason, controller.Truncate(obs.problem.message, maxMessage))
	case complete && !available:
		set(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonUnavailable, "Fewer replicas are available than desired")
	default:
		set(v1alpha1.ConditionDegraded, false, v1alpha1.ReasonAvailable, "No fault observed")
	}
}

// canaryStatus is status.canary for a running canary beside the stable
// Deployment d; the weights are each side's share of available pods.
func canaryStatus(c *canaryReport, d *appsv1.Deployment) *v1alpha1.WebAppCanaryStatus {
	st := &v1alpha1.WebAppCanaryStatus{Step: c.step, Steps: c.steps, CanaryImage: c.canaryImage, StableImage: templateImage(d),
		CanaryReplicas: c.canaryReplicas, StableReplicas: ptr.Deref(d.Spec.Replicas, 1), Message: controller.Truncate(c.message, maxMessage)}
	if all := c.canaryAvailable + d.Status.AvailableReplicas; all > 0 {
		st.CanaryWeight = c.canaryAvailable * 100 / all
		st.StableWeight = 100 - st.CanaryWeight
	}
	return st
}

func ingressURL(in *v1alpha1.WebAppIngress) string {
	scheme := "http"
	if in.TLSSecretName != "" {
		scheme = "https"
	}
	return scheme + "://" + in.Host + strings.TrimSuffix(in.Path, "/")
}
