package webapp

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// podProblem is what keeps a WebApp's pods from running, in the words of
// the kubelet, the scheduler and the container itself.
type podProblem struct {
	reason, message string
	// rank orders problems: the lowest is the one the user must fix first.
	rank int
}

// Diagnosis timing: pods are read (without the cache: caching every pod
// of every WebApp would cost more memory than the WebApps themselves) only
// once a rollout has made no progress for stuckAfter, and again every
// diagnoseEvery while it stays stuck, since a crash loop changes no
// Deployment field that would wake the reconcile.
const (
	stuckAfter    = 15 * time.Second
	diagnoseEvery = 30 * time.Second
)

// stuckFor says how long d has had unavailable pods without progress, or
// 0 when it is not stuck: the Deployment controller moves its Progressing
// condition's lastUpdateTime whenever a pod becomes available.
func stuckFor(d *appsv1.Deployment, now time.Time) time.Duration {
	if d.Status.ObservedGeneration < d.Generation || d.Status.UnavailableReplicas == 0 && d.Status.UpdatedReplicas == d.Status.Replicas {
		return 0
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && !c.LastUpdateTime.IsZero() {
			return max(now.Sub(c.LastUpdateTime.Time), time.Nanosecond)
		}
	}
	return 0
}

// diagnosePods lists d's pods when d is stuck and returns the problem to
// report, and when to look again.
func (r *Reconciler) diagnosePods(ctx context.Context, d *appsv1.Deployment, now time.Time) (*podProblem, time.Duration, error) {
	stuck := stuckFor(d, now)
	switch {
	case stuck == 0:
		return nil, 0, nil
	case stuck < stuckAfter:
		return nil, stuckAfter - stuck, nil
	}
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return nil, 0, fmt.Errorf("failed to list the pods of Deployment %s: %w", d.Name, err)
	}
	return diagnose(pods.Items), diagnoseEvery, nil
}

// diagnose picks the problem to report among pods, or nil when none shows
// one the user can act on. It is pure.
func diagnose(pods []corev1.Pod) *podProblem {
	var found []podProblem
	for i := range pods {
		if p := diagnosePod(&pods[i]); p != nil {
			found = append(found, *p)
		}
	}
	if len(found) == 0 {
		return nil
	}
	p := slices.MinFunc(found, func(a, b podProblem) int { return cmp.Compare(a.rank, b.rank) })
	return &p
}

// Messages kubelet versions use for an image that runs as root under
// runAsNonRoot.
var rootImageHints = []string{"runAsNonRoot and image will run as root", "runAsNonRoot and image has non-numeric user"}

func diagnosePod(pod *corev1.Pod) *podProblem {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &podProblem{rank: 4, reason: v1alpha1.ReasonUnschedulable,
				message: fmt.Sprintf("Pod %s cannot be scheduled: %s", pod.Name, c.Message)}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		last := cs.LastTerminationState.Terminated
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
				return &podProblem{rank: 0, reason: v1alpha1.ReasonImagePullFailed,
					message: fmt.Sprintf("Pod %s cannot pull image %s (%s): %s", pod.Name, cs.Image, w.Reason, w.Message)}
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				msg := fmt.Sprintf("Pod %s cannot start container %s (%s): %s", pod.Name, cs.Name, w.Reason, w.Message)
				for _, h := range rootImageHints {
					if strings.Contains(w.Message, h) {
						msg += ". The image runs as root, which daytwo refuses by default; if it must, set " +
							"spec.securityContext.runAsNonRoot: false and runAsUser: 0, and add only the capabilities it needs"
						break
					}
				}
				return &podProblem{rank: 1, reason: v1alpha1.ReasonContainerConfigError, message: msg}
			case "CrashLoopBackOff":
				if last != nil && last.Reason == "OOMKilled" {
					return oomKilled(pod, cs)
				}
				msg := fmt.Sprintf("Container %s of pod %s keeps exiting (%d restarts)", cs.Name, pod.Name, cs.RestartCount)
				if last != nil {
					msg += fmt.Sprintf("; last exit code %d", last.ExitCode)
					if words := lastWords(last.Message); words != "" {
						msg += ": " + words
					}
				}
				return &podProblem{rank: 3, reason: v1alpha1.ReasonCrashLoopBackOff, message: msg}
			}
		}
		if !cs.Ready && last != nil && last.Reason == "OOMKilled" {
			return oomKilled(pod, cs)
		}
	}
	return nil
}

func oomKilled(pod *corev1.Pod, cs corev1.ContainerStatus) *podProblem {
	limit := "its memory limit"
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && c.Name == cs.Name {
			limit = "its memory limit of " + q.String()
		}
	}
	return &podProblem{rank: 2, reason: v1alpha1.ReasonOOMKilled,
		message: fmt.Sprintf("Container %s of pod %s was killed for using more than %s (%d restarts); raise spec.resources.limits.memory",
			cs.Name, pod.Name, limit, cs.RestartCount)}
}

// lastWords are the end of a termination message (the container's own, or
// its last log lines): the last three non-empty lines, at most 512 bytes.
func lastWords(msg string) string {
	lines := strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' })
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "" })
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	out := strings.Join(lines, " | ")
	if len(out) > 512 {
		out = "..." + out[len(out)-509:]
	}
	return strings.ToValidUTF8(out, "")
}
