package webapp

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// settled says whether every pod of d's current revision is available,
// as far as the Deployment controller has observed d.
func settled(d *appsv1.Deployment) bool {
	return d.Status.UnavailableReplicas == 0 && d.Status.UpdatedReplicas == d.Status.Replicas
}

// stuckFor says how long d, not settled, has made no progress: since the
// Deployment controller last moved its Progressing condition (it does when
// a pod of a rollout becomes available), or since daytwo first saw it
// unsettled (a pod lost or a scale-up moves no condition), whichever is
// later.
func stuckFor(d *appsv1.Deployment, now, unsettledSince time.Time) time.Duration {
	since := unsettledSince
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.LastUpdateTime.After(since) {
			since = c.LastUpdateTime.Time
		}
	}
	return max(now.Sub(since), 0)
}

// unsettled is what a Reconciler remembers of a WebApp whose Deployment
// has not settled.
type unsettled struct {
	since time.Time
	// carried: the status reported a pod problem when this operator first
	// saw the Deployment (it restarted); that report stands until the
	// pods are looked at, rather than being cleared and written again.
	carried bool
}

// diagnosePods lists d's pods when d has been stuck for stuckAfter and
// returns the problem to report, and when to look again.
func (r *Reconciler) diagnosePods(ctx context.Context, app *v1alpha1.WebApp, d *appsv1.Deployment, now time.Time) (*podProblem, time.Duration, error) {
	key := client.ObjectKeyFromObject(app)
	if d.Status.ObservedGeneration < d.Generation {
		return nil, 0, nil // the Deployment controller's word is still to come
	}
	if settled(d) {
		r.unsettled.Delete(key)
		return nil, 0, nil
	}
	v, seen := r.unsettled.Load(key)
	if !seen {
		v = unsettled{since: now, carried: reported(app) != nil}
		r.unsettled.Store(key, v)
	}
	u := v.(unsettled)
	if stuck := stuckFor(d, now, u.since); stuck < stuckAfter {
		if u.carried {
			return reported(app), stuckAfter - stuck, nil
		}
		return nil, stuckAfter - stuck, nil
	}
	r.unsettled.Store(key, unsettled{since: u.since})
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(SelectorOf(d))); err != nil {
		return nil, 0, fmt.Errorf("failed to list the pods of Deployment %s: %w", d.Name, err)
	}
	return diagnose(pods.Items, templateHash(d)), diagnoseEvery, nil
}

// problemReasons are the reasons a podProblem reports under.
var problemReasons = []string{v1alpha1.ReasonImagePullFailed, v1alpha1.ReasonContainerConfigError,
	v1alpha1.ReasonOOMKilled, v1alpha1.ReasonCrashLoopBackOff, v1alpha1.ReasonUnschedulable}

// reported is the pod problem app's Degraded condition reports, if any.
func reported(app *v1alpha1.WebApp) *podProblem {
	c := meta.FindStatusCondition(app.Status.Conditions, v1alpha1.ConditionDegraded)
	if c == nil || c.Status != metav1.ConditionTrue || !slices.Contains(problemReasons, c.Reason) {
		return nil
	}
	return &podProblem{reason: c.Reason, message: c.Message}
}

// diagnose picks the problem to report among pods, or nil when none shows
// one the user can act on: among the pods of the current template (its
// hash, in each pod's annotations) first, since an older revision's pods
// are on their way out. It is pure.
func diagnose(pods []corev1.Pod, current string) *podProblem {
	var now, older []podProblem
	for i := range pods {
		p := diagnosePod(&pods[i])
		switch {
		case p == nil:
		case pods[i].Annotations[annotationTemplateHash] == current:
			now = append(now, *p)
		default:
			older = append(older, *p)
		}
	}
	found := now
	if len(found) == 0 {
		found = older
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
				// No restart count: the message stays the same while the
				// loop goes on, so the status is not rewritten for it.
				msg := fmt.Sprintf("Container %s of pod %s keeps exiting", cs.Name, pod.Name)
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
		message: fmt.Sprintf("Container %s of pod %s was killed for using more than %s; raise spec.resources.limits.memory",
			cs.Name, pod.Name, limit)}
}

// lastWords are the end of a termination message (the container's own, or
// its last log lines): the last three non-empty lines, at most 512 bytes.
func lastWords(msg string) string {
	lines := strings.FieldsFunc(redact(msg), func(r rune) bool { return r == '\n' || r == '\r' })
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

// What a container says as it dies goes into the WebApp's status, an
// Event and the operator's log, which more people can read than the
// app's Secrets: a crash that prints its DATABASE_URL (daytwo puts the
// password there) must not publish it. redact masks the password of a
// URL, a bearer or basic credential, and the value given to anything
// named like a secret (but a *_FILE, *_PATH or *_DIR, which names where
// one is). A key must start a word: ".../serviceaccount/token: no such
// file" is a path, not a token.
var (
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):[^\s@/]+@`)
	credential  = regexp.MustCompile(`(?i)\b(bearer|basic)[ \t]+[A-Za-z0-9._~+/=-]{8,}`)
	secretValue = regexp.MustCompile(`(?i)((?:^|[\s"'{(,;&?\\])[\w.-]*(?:password|passwd|pwd|secret|token|api_?key|access_?key)[\w.-]*)` +
		`(\\?["']?[ \t]*[=:][ \t]*)(\\?"[^"\\\n]*\\?"|'[^'\n]*'|[^\s,;&"'}]+)`)
)

const redacted = "[REDACTED]"

func redact(msg string) string {
	msg = urlPassword.ReplaceAllString(msg, "${1}:"+redacted+"@")
	msg = credential.ReplaceAllString(msg, "${1} "+redacted)
	return secretValue.ReplaceAllStringFunc(msg, func(m string) string {
		sub := secretValue.FindStringSubmatch(m)
		key := strings.ToUpper(sub[1])
		if strings.HasSuffix(key, "_FILE") || strings.HasSuffix(key, "_PATH") || strings.HasSuffix(key, "_DIR") {
			return m
		}
		return sub[1] + sub[2] + redacted
	})
}
