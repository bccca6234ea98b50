package webapp

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Canary timing: pods are not watched (caching every pod would cost more
// than the WebApps), so a running canary is looked at every canaryPoll.
const (
	canaryPoll            = 3 * time.Second
	defaultAnalysisWindow = 60 * time.Second
	// requestSkew is how far in the future a promote or abort request may
	// be (a client's clock ahead of the operator's); a later one is
	// ignored, or a time left in Git would act on every canary until then.
	requestSkew = time.Minute
)

// defaultCanarySteps are the steps of a Canary rollout that names none:
// one pod, then a quarter, then half of the desired replicas.
var defaultCanarySteps = []v1alpha1.WebAppCanaryStep{
	{Replicas: ptr.To[int32](1)}, {Weight: ptr.To[int32](25)}, {Weight: ptr.To[int32](50)},
}

// canarySteps are app's canary steps, or the default ones.
func canarySteps(app *v1alpha1.WebApp) []v1alpha1.WebAppCanaryStep {
	if c := canarySpec(app); c != nil && len(c.Steps) > 0 {
		return c.Steps
	}
	return defaultCanarySteps
}

func canarySpec(app *v1alpha1.WebApp) *v1alpha1.WebAppCanary {
	if r := app.Spec.Rollout; r != nil {
		return r.Canary
	}
	return nil
}

// isCanary reports whether app rolls out new revisions as canaries.
func isCanary(app *v1alpha1.WebApp) bool {
	r := app.Spec.Rollout
	return r != nil && r.Strategy == v1alpha1.RolloutCanary
}

// stepReplicas is how many canary pods step runs beside total stable ones:
// its replicas, or its weight of total rounded up; at least one.
func stepReplicas(step v1alpha1.WebAppCanaryStep, total int32) int32 {
	if step.Replicas != nil {
		return max(*step.Replicas, 1)
	}
	w := ptr.Deref(step.Weight, 100)
	return max((w*total+99)/100, 1)
}

func analysisWindow(step v1alpha1.WebAppCanaryStep) time.Duration {
	if step.AnalysisSeconds == nil {
		return defaultAnalysisWindow
	}
	return time.Duration(*step.AnalysisSeconds) * time.Second
}

// canaryState is where a canary stands, as its Deployment records it.
type canaryState struct {
	// step is the current step, from 0.
	step int
	// started is when the canary of this revision began.
	started time.Time
	// since is when every pod of the current step was first seen
	// available: the step's analysis window runs from there. Zero before.
	since time.Time
	// stepStarted is when the current step began, began again after a
	// hold, or last lost a pod it had available: its pods must all be
	// available within the progress deadline from there. The Deployment
	// controller's own deadline covers only a new Deployment's first
	// rollout, not a later step's scale-up.
	stepStarted time.Time
	// steps identifies the steps the canary runs (hashOf them): a change
	// starts them again from the first, as a new plan.
	steps string
	// ignored are promote and abort request times seen more than
	// requestSkew ahead of the clock while this canary ran: they never act
	// on it, or a time zone mistake would wait hours and then act on
	// whatever canary runs then.
	ignored []time.Time
	// total is the stable pods' desired count when the canary started:
	// the steps' weights are of it, so an HPA scaling the stable pods does
	// not move a step under way.
	total int32
	// restartBaseline is the canary pods' restarts when a hold (the
	// Database) last ended: restarts while a dependency was down do not
	// count against the canary.
	restartBaseline int32
}

// canaryAction is what decideCanary tells the controller to do.
type canaryAction int

const (
	// canaryRun runs the step's canary pods and keeps watching them.
	canaryRun canaryAction = iota
	// canaryHold keeps the canary as it is: a dependency is unavailable.
	canaryHold
	// canaryPromote gives the stable pods the canary's revision.
	canaryPromote
	// canaryAbort removes the canary and holds its revision back.
	canaryAbort
)

// canaryInput is everything decideCanary decides from.
type canaryInput struct {
	steps []v1alpha1.WebAppCanaryStep
	state canaryState
	// available is how many pods of the canary's current template are ready.
	available int32
	// signal is the first bad signal the canary's pods show, if any, and
	// restarts their containers' restarts in all. problem is what keeps a
	// pod from running when that is no signal by itself (a crash loop
	// within maxRestarts): a missed deadline quotes it.
	signal, problem string
	restarts        int32
	// promoteRequested and abortRequested are the WebApp's request times.
	promoteRequested, abortRequested time.Time
	// hold says why the canary must not move now (the Database), if so.
	hold string
	// deadline is how long a step's pods may take to be available.
	deadline time.Duration
	now      time.Time
}

// canaryDecision is what to do, and the state to record.
type canaryDecision struct {
	action   canaryAction
	state    canaryState
	replicas int32
	// reason and message describe the step for the status, or the signal
	// that aborted the canary.
	reason, message string
	// requeue is when to look again.
	requeue time.Duration
}

// decideCanary moves a canary through its steps. It is pure: the same
// input gives the same decision. An abort request wins over everything,
// then a hold (the canary's pods say little while its Database is down,
// so their signals wait), then a bad signal, then a promote request;
// otherwise the step's pods must all be available and stay healthy for
// the step's window before the next step.
func decideCanary(in canaryInput) canaryDecision {
	st := in.state
	n := len(in.steps)
	d := canaryDecision{action: canaryRun, state: st, reason: v1alpha1.ReasonCanaryProgressing, requeue: canaryPoll}
	if st.stepStarted.IsZero() {
		d.state.stepStarted = in.now.Truncate(time.Second)
	}
	if st.step < n {
		d.replicas = stepReplicas(in.steps[st.step], st.total)
	}
	// Times have whole seconds: a request in the second the canary
	// started is for it.
	ahead := func(t time.Time) bool { return t.After(in.now.Add(requestSkew)) }
	for _, t := range []time.Time{in.promoteRequested, in.abortRequested} {
		if !t.IsZero() && ahead(t) && !slices.ContainsFunc(d.state.ignored, t.Equal) {
			d.state.ignored = append(slices.Clone(d.state.ignored), t)
		}
	}
	requested := func(t time.Time) bool {
		return !t.IsZero() && !t.Before(st.started) && !ahead(t) && !slices.ContainsFunc(d.state.ignored, t.Equal)
	}
	switch {
	case requested(in.abortRequested):
		d.action, d.reason = canaryAbort, v1alpha1.ReasonCanaryAborted
		d.message = "Aborted on request (" + v1alpha1.AnnotationAbortRequested + " " + in.abortRequested.UTC().Format(time.RFC3339) + ")"
		return d
	case in.hold != "":
		// The window and the step's deadline start again once the
		// dependency is back, and the restarts meanwhile are forgiven:
		// the pods are looked at every canaryPoll during the hold too,
		// so the forgiven count is the one at its end.
		d.action, d.reason = canaryHold, v1alpha1.ReasonDatabaseUnavailable
		d.state.since, d.state.stepStarted, d.state.restartBaseline = time.Time{}, time.Time{}, in.restarts
		d.message = fmt.Sprintf("Paused at step %d of %d: %s", min(st.step+1, n), n, in.hold)
		return d
	case in.signal != "":
		d.action, d.reason, d.message = canaryAbort, v1alpha1.ReasonCanaryAborted, in.signal
		return d
	case requested(in.promoteRequested) || st.step >= n:
		d.action, d.reason, d.requeue = canaryPromote, v1alpha1.ReasonCanaryPromoting, 0
		d.message = fmt.Sprintf("Promoting: the stable pods roll to the canary's revision after %d of %d steps", min(st.step, n), n)
		return d
	}
	step := in.steps[st.step]
	if in.available < d.replicas {
		if !st.since.IsZero() {
			// A pod it had is gone (evicted, say): its replacement gets
			// the whole deadline.
			d.state.stepStarted = in.now.Truncate(time.Second)
		}
		d.state.since = time.Time{}
		if in.deadline > 0 && in.now.Sub(d.state.stepStarted) > in.deadline {
			d.action, d.reason = canaryAbort, v1alpha1.ReasonCanaryAborted
			d.message = fmt.Sprintf("ProgressDeadlineExceeded: %d of the %d canary pods of step %d of %d available after %d seconds",
				in.available, d.replicas, st.step+1, n, int(in.deadline.Seconds()))
			if in.problem != "" {
				d.message += "; " + in.problem
			}
			return d
		}
		d.message = fmt.Sprintf("Step %d of %d: %d of %d canary pods available", st.step+1, n, in.available, d.replicas)
		return d
	}
	if st.since.IsZero() {
		d.state.since = in.now.Truncate(time.Second)
	}
	end := d.state.since.Add(analysisWindow(step))
	if left := end.Sub(in.now); left > 0 {
		// The end, not the time left: the message stays the same from one
		// look to the next, and the status is not rewritten each time.
		d.message = fmt.Sprintf("Step %d of %d: watching %d canary pods until %s", st.step+1, n, d.replicas, end.UTC().Format(time.RFC3339))
		d.requeue = min(left, canaryPoll)
		return d
	}
	if step.WaitForPromotion {
		d.reason = v1alpha1.ReasonCanaryWaiting
		d.message = fmt.Sprintf("Step %d of %d: %d canary pods healthy; waiting for %s", st.step+1, n, d.replicas, v1alpha1.AnnotationPromoteRequested)
		return d
	}
	next := in
	next.state = st
	next.state.step, next.state.since, next.state.stepStarted = st.step+1, time.Time{}, time.Time{}
	return decideCanary(next)
}
