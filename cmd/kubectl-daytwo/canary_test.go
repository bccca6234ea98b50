package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Where a rollout stands, from the WebApp statuses daytwo writes: done
// only when the spec's image runs everywhere with no canary left.
func TestRolloutOf(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " message"}
	}
	app := func(image string, canary *v1alpha1.WebAppCanaryStatus, conds ...metav1.Condition) *v1alpha1.WebApp {
		return &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 2}, Spec: v1alpha1.WebAppSpec{Image: "shop:2"},
			Status: v1alpha1.WebAppStatus{ObservedGeneration: 2, CurrentImage: image, Replicas: 4, AvailableReplicas: 4, Canary: canary, Conditions: conds}}
	}
	ready := cond(v1alpha1.ConditionReady, metav1.ConditionTrue, "Available")
	step := &v1alpha1.WebAppCanaryStatus{Step: 1, Steps: 3, CanaryImage: "shop:2", StableImage: "shop:1", CanaryReplicas: 1, StableReplicas: 4, CanaryWeight: 20}
	stale := app("shop:2", nil, ready)
	stale.Generation = 3
	for name, c := range map[string]struct {
		app  *v1alpha1.WebApp
		want rolloutState
	}{
		"done":                {app("shop:2", nil, ready, cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete)), rolloutDone},
		"spec not observed":   {stale, rolloutRunning},
		"old image":           {app("shop:1", nil, ready), rolloutRunning},
		"canary step":         {app("shop:1", step, ready, cond(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonCanaryProgressing)), rolloutRunning},
		"waiting for promote": {app("shop:1", step, ready, cond(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonCanaryWaiting)), rolloutRunning},
		"aborted": {app("shop:1", nil, ready, cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonCanaryAborted),
			cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonCanaryAborted)), rolloutFailed},
		"rolled back": {app("shop:1", nil, cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonRolledBack)), rolloutFailed},
		"deadline": {app("shop:1", nil, ready, cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonProgressDeadlineExceeded),
			cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonProgressDeadlineExceeded)), rolloutFailed},
		"promoting": {app("shop:1", nil, ready, cond(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonCanaryPromoting)), rolloutRunning},
	} {
		got, line := rolloutOf(c.app)
		if got != c.want || line == "" {
			t.Errorf("%s: %d (%s), want %d", name, got, line, c.want)
		}
	}
}
