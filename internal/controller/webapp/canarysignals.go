package webapp

import (
	"cmp"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// canarySignal is the first bad signal the canary's pods of template hash
// show, or "": more container exits than baseline (those forgiven during
// a hold) plus maxRestarts (an exit the kubelet has not restarted yet
// counts: it comes before the restart, and before the readiness it
// costs), a latest exit past the forgiven ones that was an OOM kill, a
// pod problem the user must fix (an image that cannot be pulled or
// started), or a readiness flap (a pod seen ready before, in wasReady,
// that is not ready now while its container runs). A crash loop is its exits, counted as
// exits: the kubelet's back-off after a second quick exit must not
// override maxRestarts, nor a back-off from a forgiven exit the hold. A
// pod in phase Failed (evicted, or stopped by a node shutdown: a
// Deployment's pods are restarted otherwise) says nothing of its revision.
// It returns the pods ready now, the next call's wasReady, the exits
// counted, and the first problem that is no signal (a crash loop), for a
// missed deadline to quote. It is pure.
func canarySignal(pods []corev1.Pod, hash string, baseline, maxRestarts int32, wasReady sets.Set[types.UID]) (signal string, ready sets.Set[types.UID], exits int32, problem string) {
	ready = sets.New[types.UID]()
	var latest *corev1.Pod
	for i := range pods {
		pod := &pods[i]
		if pod.Annotations[annotationTemplateHash] != hash || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		cs := appStatus(pod)
		exited := cs != nil && cs.State.Terminated != nil
		if podReady(pod) {
			ready.Insert(pod.UID)
		} else if wasReady.Has(pod.UID) && !exited && signal == "" {
			signal = fmt.Sprintf("Readiness flap: canary pod %s was ready and is not any more", pod.Name)
		}
		switch p := diagnosePod(pod); {
		case p == nil:
		case p.reason == v1alpha1.ReasonUnschedulable, p.reason == v1alpha1.ReasonCrashLoopBackOff, p.reason == v1alpha1.ReasonOOMKilled:
			// Counted as exits below; the step's deadline covers the rest.
			problem = cmp.Or(problem, p.reason+": "+p.message)
		case signal == "":
			signal = p.reason + ": " + p.message
		}
		if cs == nil {
			continue
		}
		n := cs.RestartCount
		if exited {
			n++
		}
		if n > 0 {
			exits += n
			if latest == nil || lastExit(cs).After(lastExit(appStatus(latest))) {
				latest = pod
			}
		}
	}
	switch {
	case exits > baseline+maxRestarts:
		// An exit is the earliest sign of a crash, and says more than the
		// flap or the back-off it causes.
		signal = exitSignal(latest, exits-baseline, maxRestarts)
	case exits > baseline && lastTermination(appStatus(latest)).Reason == "OOMKilled":
		signal = "OOMKilled: " + oomKilled(latest, *appStatus(latest)).message
	}
	return signal, ready, exits, problem
}

// lastTermination is how cs last ended: now, or before its restart.
func lastTermination(cs *corev1.ContainerStatus) corev1.ContainerStateTerminated {
	if t := cs.State.Terminated; t != nil {
		return *t
	}
	if t := cs.LastTerminationState.Terminated; t != nil {
		return *t
	}
	return corev1.ContainerStateTerminated{}
}

// exitSignal says which container exited and why, in its own words.
func exitSignal(pod *corev1.Pod, exits, allowed int32) string {
	cs := appStatus(pod)
	t := lastTermination(cs)
	if t.Reason == "OOMKilled" {
		return "OOMKilled: " + oomKilled(pod, *cs).message
	}
	msg := fmt.Sprintf("Restarts: container %s of canary pod %s exited (%d exits in all, %d allowed); exit code %d",
		cs.Name, pod.Name, exits, allowed, t.ExitCode)
	if t.Reason != "" {
		msg += " (" + t.Reason + ")"
	}
	if words := lastWords(t.Message); words != "" {
		msg += ": " + words
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
	return lastTermination(cs).FinishedAt.Time
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
