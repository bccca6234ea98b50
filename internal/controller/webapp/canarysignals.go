package webapp

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// canarySignal is the first bad signal the canary's pods of template hash
// show, or "": a pod problem the user must fix (an image that cannot be
// pulled or started, a crash loop, an OOM kill), more container restarts
// than maxRestarts in all, or a readiness flap (a pod seen ready before,
// in wasReady, that is not ready now). It returns the pods ready now, the
// next call's wasReady, and the restarts counted. It is pure.
func canarySignal(pods []corev1.Pod, hash string, maxRestarts int32, wasReady sets.Set[types.UID]) (string, sets.Set[types.UID], int32) {
	ready := sets.New[types.UID]()
	var restarts int32
	var restarted *corev1.Pod
	signal := ""
	for i := range pods {
		pod := &pods[i]
		if pod.Annotations[annotationTemplateHash] != hash || pod.DeletionTimestamp != nil {
			continue
		}
		if podReady(pod) {
			ready.Insert(pod.UID)
		} else if wasReady.Has(pod.UID) && signal == "" {
			signal = fmt.Sprintf("Readiness flap: canary pod %s was ready and is not any more", pod.Name)
		}
		if p := diagnosePod(pod); p != nil && p.reason != v1alpha1.ReasonUnschedulable && signal == "" {
			signal = p.reason + ": " + p.message
		}
		if cs := appStatus(pod); cs != nil && cs.RestartCount > 0 {
			restarts += cs.RestartCount
			if restarted == nil || lastExit(cs).After(lastExit(appStatus(restarted))) {
				restarted = pod
			}
		}
	}
	if restarts > maxRestarts {
		// A restart is the earliest sign of a crash: it comes before the
		// kubelet's back-off, and says more than a flap it causes.
		return restartSignal(restarted, restarts, maxRestarts), ready, restarts
	}
	return signal, ready, restarts
}

// restartSignal says which container restarted and why, in its own words.
func restartSignal(pod *corev1.Pod, restarts, allowed int32) string {
	cs := appStatus(pod)
	msg := fmt.Sprintf("Restarts: container %s of canary pod %s restarted (%d restarts in all, %d allowed)", cs.Name, pod.Name, restarts, allowed)
	if t := cs.LastTerminationState.Terminated; t != nil {
		if t.Reason == "OOMKilled" {
			return "OOMKilled: " + oomKilled(pod, *cs).message
		}
		msg += fmt.Sprintf("; exit code %d", t.ExitCode)
		if t.Reason != "" {
			msg += " (" + t.Reason + ")"
		}
		if words := lastWords(t.Message); words != "" {
			msg += ": " + words
		}
	}
	return msg
}

func appStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == containerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func lastExit(cs *corev1.ContainerStatus) time.Time {
	if t := cs.LastTerminationState.Terminated; t != nil {
		return t.FinishedAt.Time
	}
	return time.Time{}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// httpTally counts the HTTP check's answers during one canary step.
type httpTally struct {
	// step identifies the step counted: the canary's template hash, step
	// and start of its window.
	step       string
	last       time.Time
	ok, total  int32
	lastFailed string
}

// httpVerdict is the HTTP check's signal for a step's tally, or "" while
// the step has sent too few requests or enough succeed. It is pure.
func httpVerdict(t httpTally, check *v1alpha1.WebAppHTTPCheck) string {
	if t.total < max(check.MinRequests, 1) || t.ok*100 >= check.SuccessPercent*t.total {
		return ""
	}
	return fmt.Sprintf("HTTPCheck: %d of %d requests to GET %s on the canary pods succeeded (%d%%, below %d%%); last failure: %s",
		t.ok, t.total, check.Path, t.ok*100/t.total, check.SuccessPercent, t.lastFailed)
}
