package webapp

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

func TestStepReplicas(t *testing.T) {
	for _, tt := range []struct {
		step        v1alpha1.WebAppCanaryStep
		total, want int32
	}{
		{v1alpha1.WebAppCanaryStep{Replicas: ptr.To[int32](1)}, 10, 1},
		{v1alpha1.WebAppCanaryStep{Weight: ptr.To[int32](25)}, 10, 3}, // rounded up
		{v1alpha1.WebAppCanaryStep{Weight: ptr.To[int32](25)}, 3, 1},
		{v1alpha1.WebAppCanaryStep{Weight: ptr.To[int32](50)}, 3, 2},
		{v1alpha1.WebAppCanaryStep{Weight: ptr.To[int32](1)}, 0, 1}, // never none
		{v1alpha1.WebAppCanaryStep{Weight: ptr.To[int32](100)}, 4, 4},
	} {
		if got := stepReplicas(tt.step, tt.total); got != tt.want {
			t.Errorf("stepReplicas(%+v, %d) = %d, want %d", tt.step, tt.total, got, tt.want)
		}
	}
}

func TestDecideCanary(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	steps := []v1alpha1.WebAppCanaryStep{
		{Replicas: ptr.To[int32](1), AnalysisSeconds: ptr.To[int32](30)},
		{Weight: ptr.To[int32](50), AnalysisSeconds: ptr.To[int32](0)},
		{Weight: ptr.To[int32](100), AnalysisSeconds: ptr.To[int32](10), WaitForPromotion: true},
	}
	base := canaryInput{steps: steps, state: canaryState{started: t0, total: 4}, now: t0}
	for _, tt := range []struct {
		name     string
		mutate   func(*canaryInput)
		action   canaryAction
		step     int
		replicas int32
		since    time.Time
		baseline int32
		reason   string
		message  string
	}{
		{name: "a new canary runs the first step's pods", mutate: func(*canaryInput) {},
			action: canaryRun, replicas: 1, reason: v1alpha1.ReasonCanaryProgressing, message: "0 of 1 canary pods available"},
		{name: "the window starts when the step's pods are available",
			mutate: func(in *canaryInput) { in.available, in.now = 1, t0.Add(5*time.Second) },
			action: canaryRun, replicas: 1, since: t0.Add(5 * time.Second), message: "watching 1 canary pods until 2026-11-26T06:00:35Z"},
		{name: "within the window nothing moves, and the message stays",
			mutate: func(in *canaryInput) { in.available, in.state.since, in.now = 1, t0, t0.Add(29*time.Second) },
			action: canaryRun, replicas: 1, since: t0, message: "Step 1 of 3: watching 1 canary pods until 2026-11-26T06:00:30Z"},
		{name: "after the window the next step starts; a step with no window and its pods available passes at once",
			mutate: func(in *canaryInput) { in.available, in.state.since, in.now = 2, t0, t0.Add(31*time.Second) },
			action: canaryRun, step: 2, replicas: 4, message: "Step 3 of 3: 2 of 4 canary pods available"},
		{name: "a step that waits for promotion holds after its window",
			mutate: func(in *canaryInput) {
				in.state, in.available, in.now = canaryState{step: 2, started: t0, since: t0, total: 4}, 4, t0.Add(time.Minute)
			},
			action: canaryRun, step: 2, replicas: 4, since: t0, reason: v1alpha1.ReasonCanaryWaiting, message: "waiting for daytwo.dev/promote-requested"},
		{name: "a promote request newer than the start promotes",
			mutate: func(in *canaryInput) { in.promoteRequested = t0.Add(time.Second) },
			action: canaryPromote, replicas: 1, reason: v1alpha1.ReasonCanaryPromoting},
		{name: "a promote request far in the future is ignored (a time left in Git)",
			mutate: func(in *canaryInput) { in.promoteRequested = t0.Add(time.Hour) },
			action: canaryRun, replicas: 1},
		{name: "and stays ignored by this canary when its time comes (a time zone mistake)",
			mutate: func(in *canaryInput) {
				in.promoteRequested, in.now, in.state.ignored = t0.Add(time.Hour), t0.Add(time.Hour), []time.Time{t0.Add(time.Hour)}
			},
			action: canaryRun, replicas: 1},
		{name: "a promote request older than the start is for an earlier canary",
			mutate: func(in *canaryInput) { in.promoteRequested = t0.Add(-time.Second) },
			action: canaryRun, replicas: 1},
		{name: "past the last step it is promoted",
			mutate: func(in *canaryInput) { in.state.step = 3 },
			action: canaryPromote, step: 3, reason: v1alpha1.ReasonCanaryPromoting},
		{name: "a signal aborts, even past the last step",
			mutate: func(in *canaryInput) { in.state.step, in.signal = 3, "Restarts: boom" },
			action: canaryAbort, step: 3, reason: v1alpha1.ReasonCanaryAborted, message: "Restarts: boom"},
		{name: "an abort request aborts",
			mutate: func(in *canaryInput) { in.abortRequested = t0.Add(time.Second) },
			action: canaryAbort, replicas: 1, reason: v1alpha1.ReasonCanaryAborted, message: "Aborted on request"},
		{name: "a Database hold keeps the step and restarts its window",
			mutate: func(in *canaryInput) {
				in.available, in.state.since, in.now, in.hold = 1, t0, t0.Add(time.Hour), "Database db is not Ready"
			},
			action: canaryHold, replicas: 1, reason: v1alpha1.ReasonDatabaseUnavailable, message: "Paused at step 1 of 3: Database db is not Ready"},
		{name: "a hold wins over a signal, and forgives the restarts meanwhile",
			mutate: func(in *canaryInput) { in.hold, in.signal, in.restarts = "Database db is not Ready", "Restarts: x", 2 },
			action: canaryHold, replicas: 1, baseline: 2, reason: v1alpha1.ReasonDatabaseUnavailable},
		{name: "an abort request wins over a hold",
			mutate: func(in *canaryInput) { in.hold, in.abortRequested = "Database db is not Ready", t0 },
			action: canaryAbort, replicas: 1, reason: v1alpha1.ReasonCanaryAborted},
		{name: "a step's pods not available within the deadline abort it",
			mutate: func(in *canaryInput) {
				in.state = canaryState{step: 1, started: t0, stepStarted: t0.Add(time.Minute), total: 4}
				in.available, in.deadline, in.now = 1, 10*time.Minute, t0.Add(11*time.Minute+time.Second)
			},
			action: canaryAbort, step: 1, replicas: 2, reason: v1alpha1.ReasonCanaryAborted,
			message: "ProgressDeadlineExceeded: 1 of the 2 canary pods of step 2 of 3 available after 600 seconds"},
		{name: "a missed deadline quotes why the pods do not run",
			mutate: func(in *canaryInput) {
				in.state = canaryState{step: 1, started: t0, stepStarted: t0, total: 4}
				in.deadline, in.now, in.problem = time.Minute, t0.Add(2*time.Minute), "CrashLoopBackOff: Container app of pod p keeps exiting; last exit code 2"
			},
			action: canaryAbort, step: 1, replicas: 2, reason: v1alpha1.ReasonCanaryAborted,
			message: "available after 60 seconds; CrashLoopBackOff: Container app of pod p keeps exiting; last exit code 2"},
		{name: "a step that loses a pod long after it began gives the replacement the whole deadline",
			mutate: func(in *canaryInput) {
				in.state = canaryState{step: 1, started: t0, since: t0.Add(time.Minute), stepStarted: t0, total: 4}
				in.available, in.deadline, in.now = 1, 10*time.Minute, t0.Add(time.Hour)
			},
			action: canaryRun, step: 1, replicas: 2, message: "Step 2 of 3: 1 of 2 canary pods available"},
		{name: "within the deadline a step's pods may take their time",
			mutate: func(in *canaryInput) {
				in.state = canaryState{step: 1, started: t0, stepStarted: t0.Add(time.Minute), total: 4}
				in.available, in.deadline, in.now = 1, 10*time.Minute, t0.Add(10*time.Minute)
			},
			action: canaryRun, step: 1, replicas: 2, message: "Step 2 of 3: 1 of 2 canary pods available"},
		{name: "weights are of the stable count when the canary started",
			mutate: func(in *canaryInput) { in.state = canaryState{step: 1, started: t0, total: 10} },
			action: canaryRun, step: 1, replicas: 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			tt.mutate(&in)
			d := decideCanary(in)
			if d.state.restartBaseline != tt.baseline {
				t.Errorf("restart baseline = %d, want %d", d.state.restartBaseline, tt.baseline)
			}
			if d.action != tt.action || d.state.step != tt.step || d.replicas != tt.replicas || !d.state.since.Equal(tt.since) {
				t.Errorf("decision = action %d step %d replicas %d since %v, want action %d step %d replicas %d since %v (%s)",
					d.action, d.state.step, d.replicas, d.state.since, tt.action, tt.step, tt.replicas, tt.since, d.message)
			}
			if tt.reason != "" && d.reason != tt.reason {
				t.Errorf("reason = %s, want %s", d.reason, tt.reason)
			}
			if !strings.Contains(d.message, tt.message) {
				t.Errorf("message = %q, want it to contain %q", d.message, tt.message)
			}
			if !d.state.started.Equal(t0) {
				t.Errorf("started = %v, want it kept", d.state.started)
			}
		})
	}
}

func TestCanarySignal(t *testing.T) {
	pod := func(uid string, ready bool, mutate func(*corev1.ContainerStatus)) corev1.Pod {
		cs := corev1.ContainerStatus{Name: containerName, Ready: ready}
		if mutate != nil {
			mutate(&cs)
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "shop-canary-" + uid, UID: types.UID(uid), Annotations: map[string]string{annotationTemplateHash: "new"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
				ContainerStatuses: []corev1.ContainerStatus{cs}},
		}
	}
	exited := func(reason string, code int32, msg string) func(*corev1.ContainerStatus) {
		return func(cs *corev1.ContainerStatus) {
			cs.RestartCount = 1
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code, Message: msg}
		}
	}
	backOff := func(restarts int32, reason string) func(*corev1.ContainerStatus) {
		return func(cs *corev1.ContainerStatus) {
			cs.RestartCount = restarts
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: reason, ExitCode: 1}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		}
	}
	evicted := pod("e", false, func(cs *corev1.ContainerStatus) {
		cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 137}
	})
	evicted.Status.Phase, evicted.Status.Reason = corev1.PodFailed, "Evicted"
	older := pod("old", false, exited("Error", 1, "old revision"))
	older.Annotations[annotationTemplateHash] = "stable"
	for _, tt := range []struct {
		name        string
		pods        []corev1.Pod
		baseline    int32
		maxRestarts int32
		was         []types.UID
		want        string
		problem     string
		ready       int
	}{
		{name: "healthy pods show nothing", pods: []corev1.Pod{pod("a", true, nil), pod("b", false, nil)}, ready: 1},
		{name: "another revision's pods do not count", pods: []corev1.Pod{older}},
		{name: "a restart aborts, in the container's words",
			pods: []corev1.Pod{pod("a", true, exited("Error", 3, "line 1\npanic: nil map"))},
			want: "Restarts: container app of canary pod shop-canary-a exited (1 exits in all, 0 allowed); exit code 3 (Error): line 1 | panic: nil map", ready: 1},
		{name: "an exit not yet restarted counts, and is no readiness flap",
			pods: []corev1.Pod{pod("a", false, func(cs *corev1.ContainerStatus) {
				cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, Message: "fatal: crashing"}
			})},
			was:  []types.UID{"a"},
			want: "Restarts: container app of canary pod shop-canary-a exited (1 exits in all, 0 allowed); exit code 1 (Error): fatal: crashing"},
		{name: "restarts up to maxRestarts are allowed",
			pods: []corev1.Pod{pod("a", true, exited("Error", 3, "x"))}, maxRestarts: 1, ready: 1},
		{name: "an OOM kill says so with the limit",
			pods: []corev1.Pod{pod("a", false, exited("OOMKilled", 137, ""))},
			want: "OOMKilled: Container app of pod shop-canary-a was killed for using more than its memory limit of 64Mi; raise spec.resources.limits.memory"},
		{name: "a readiness flap", pods: []corev1.Pod{pod("a", false, nil)}, was: []types.UID{"a"},
			want: "Readiness flap: canary pod shop-canary-a was ready and is not any more"},
		{name: "a crash loop within maxRestarts is its exits: the back-off aborts nothing",
			pods: []corev1.Pod{pod("a", false, backOff(2, "Error"))}, maxRestarts: 5,
			problem: "CrashLoopBackOff: Container app of pod shop-canary-a keeps exiting; last exit code 1"},
		{name: "exits forgiven during a hold, and the back-off they leave, do not count",
			pods: []corev1.Pod{pod("a", false, backOff(3, "Error"))}, baseline: 3, problem: "CrashLoopBackOff"},
		{name: "an exit after the forgiven ones counts",
			pods: []corev1.Pod{pod("a", false, backOff(4, "Error"))}, baseline: 3,
			want: "Restarts: container app of canary pod shop-canary-a exited (1 exits in all, 0 allowed); exit code 1 (Error)"},
		{name: "a forgiven OOM kill does not count", pods: []corev1.Pod{pod("a", false, exited("OOMKilled", 137, ""))}, baseline: 1, problem: "OOMKilled"},
		{name: "nor when a later exit, within maxRestarts, is no OOM kill",
			pods: []corev1.Pod{pod("a", false, exited("OOMKilled", 137, "")), pod("b", true, func(cs *corev1.ContainerStatus) {
				cs.RestartCount = 1
				cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, FinishedAt: metav1.Now()}
			})},
			baseline: 1, maxRestarts: 3, ready: 1, problem: "OOMKilled"},
		{name: "an OOM kill aborts within maxRestarts", pods: []corev1.Pod{pod("a", false, backOff(1, "OOMKilled"))}, maxRestarts: 3,
			want: "OOMKilled: Container app of pod shop-canary-a was killed", problem: "OOMKilled"},
		{name: "an evicted pod says nothing of its revision", pods: []corev1.Pod{evicted}, was: []types.UID{"e"}},
		{name: "an image that cannot be pulled",
			pods: []corev1.Pod{pod("a", false, func(cs *corev1.ContainerStatus) {
				cs.Image, cs.State.Waiting = "shop:bad", &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"}
			})},
			want: "ImagePullFailed: Pod shop-canary-a cannot pull image shop:bad (ImagePullBackOff): not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ready, _, problem := canarySignal(tt.pods, "new", tt.baseline, tt.maxRestarts, sets.New(tt.was...))
			if !strings.HasPrefix(problem, tt.problem) {
				t.Errorf("problem = %q, want %q", problem, tt.problem)
			}
			if got != tt.want && (tt.want == "" || !strings.HasPrefix(got, tt.want)) {
				t.Errorf("signal = %q\nwant     %q", got, tt.want)
			}
			if ready.Len() != tt.ready {
				t.Errorf("ready = %v, want %d pods", ready.UnsortedList(), tt.ready)
			}
		})
	}
}

func TestHTTPVerdict(t *testing.T) {
	check := &v1alpha1.WebAppHTTPCheck{Path: "/healthz", SuccessPercent: 95, MinRequests: 5}
	if v := httpVerdict(httpTally{ok: 0, total: 4}, check); v != "" {
		t.Errorf("4 failures of 4 = %q, want no verdict before minRequests", v)
	}
	if v := httpVerdict(httpTally{ok: 19, total: 20}, check); v != "" {
		t.Errorf("19 of 20 = %q, want none at 95%%", v)
	}
	v := httpVerdict(httpTally{ok: 3, total: 5, lastFailed: "pod a: answered 500 Internal Server Error"}, check)
	if want := "HTTPCheck: 3 of 5 requests to GET /healthz on the canary pods succeeded (60%, below 95%); last failure: pod a: answered 500 Internal Server Error"; v != want {
		t.Errorf("3 of 5 = %q\nwant  %q", v, want)
	}
}

func TestDatabaseHold(t *testing.T) {
	ready := []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
	notReady := []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}}
	for _, tt := range []struct {
		status v1alpha1.DatabaseStatus
		want   string
	}{
		{v1alpha1.DatabaseStatus{Phase: v1alpha1.DatabasePhaseReady, Conditions: ready}, ""},
		{v1alpha1.DatabaseStatus{Phase: v1alpha1.DatabasePhaseCreating, Conditions: notReady}, ""},
		{v1alpha1.DatabaseStatus{}, ""},
		{v1alpha1.DatabaseStatus{Phase: v1alpha1.DatabasePhaseDegraded, Conditions: notReady}, "Database db is not Ready"},
		{v1alpha1.DatabaseStatus{Phase: v1alpha1.DatabasePhaseReady, Conditions: ready, TargetPrimary: "db-1"}, "Database db is moving its primary to db-1"},
		{v1alpha1.DatabaseStatus{Phase: v1alpha1.DatabasePhaseUpgrading, Conditions: ready}, "Database db is upgrading or restarting its instances"},
	} {
		db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Status: tt.status}
		if got := databaseHold(db); got != tt.want {
			t.Errorf("databaseHold(%+v) = %q, want %q", tt.status, got, tt.want)
		}
	}
}

func TestCanaryHoldKeepsLooking(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	in := canaryInput{steps: defaultCanarySteps, now: t0.Add(time.Hour), hold: "Database db is moving its primary to db-1", restarts: 4,
		state: canaryState{step: 1, started: t0, since: t0, stepStarted: t0, total: 4}}
	d := decideCanary(in)
	// Looked at during the hold, the forgiven count is the one at its end;
	// after it, the step's window and deadline start from then.
	if d.action != canaryHold || d.requeue != canaryPoll || d.state.restartBaseline != 4 || !d.state.since.IsZero() || !d.state.stepStarted.IsZero() {
		t.Fatalf("hold = %+v", d)
	}
	in.hold, in.state, in.available = "", d.state, 0
	if d = decideCanary(in); d.action != canaryRun || !d.state.stepStarted.Equal(in.now) {
		t.Fatalf("after the hold = %+v, want the step started again at %v", d, in.now)
	}
}

func TestStateOfEditedSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	stamp := t0.Format(time.RFC3339)
	cd := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		annotationCanaryStep: "2", annotationCanaryStarted: stamp, annotationCanarySince: stamp, annotationCanaryStepAt: stamp,
		annotationCanaryTotal: "4", annotationCanaryBaseline: "1", annotationCanarySteps: "old",
	}}}
	fresh := canaryState{started: t0.Add(time.Hour), total: 9, steps: "new"}
	st := stateOf(cd, fresh)
	if st.step != 0 || !st.since.IsZero() || !st.stepStarted.IsZero() || !st.started.Equal(t0) || st.total != 4 || st.restartBaseline != 1 || st.steps != "new" {
		t.Errorf("edited steps: state %+v, want step 0 with the canary's start, total and baseline kept", st)
	}
	cd.Annotations[annotationCanarySteps] = "new"
	if st = stateOf(cd, fresh); st.step != 2 || !st.since.Equal(t0) || !st.stepStarted.Equal(t0) {
		t.Errorf("same steps: state %+v, want step 2 as recorded", st)
	}
	delete(cd.Annotations, annotationCanarySteps)
	if st = stateOf(cd, fresh); st.step != 0 {
		t.Errorf("a canary with no steps recorded: step %d, want 0 (they cannot be known unchanged)", st.step)
	}
}

func TestFutureRequestsAreRecorded(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	in := canaryInput{steps: defaultCanarySteps, now: t0, state: canaryState{started: t0, total: 4},
		promoteRequested: t0.Add(2 * time.Hour), abortRequested: t0.Add(30 * time.Second)}
	d := decideCanary(in)
	// The abort, within the skew allowed, acts; the promotion two hours
	// ahead is recorded as ignored.
	if d.action != canaryAbort || len(d.state.ignored) != 1 || !d.state.ignored[0].Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("decision %+v, want an abort with the promotion ignored", d)
	}
	app := &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		v1alpha1.AnnotationPromoteRequested: "2026-11-26T08:00:00Z", v1alpha1.AnnotationAbortRequested: "yesterday"}}}
	msg := unreadableRequests(app, d.state.ignored)
	for _, want := range []string{`daytwo.dev/promote-requested="2026-11-26T08:00:00Z" was more than a minute ahead`, `daytwo.dev/abort-requested="yesterday" is not an RFC 3339 time`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	// Recorded on the canary Deployment and read back.
	ac := canaryDeployment(testApp(nil), map[string]string{"daytwo.dev/webapp": "shop"}, podTemplate(testApp(nil), podInputs{}), 1, d.state, false)
	cd := controller.ApplyConfig[appsv1.Deployment](ac)
	if st := stateOf(cd, canaryState{}); len(st.ignored) != 1 || !st.ignored[0].Equal(t0.Add(2*time.Hour)) {
		t.Errorf("read back: ignored %v", st.ignored)
	}
}

func TestHeldCanaryDeploymentIsPaused(t *testing.T) {
	app := testApp(nil)
	st := canaryState{started: time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC), total: 2, steps: "s"}
	sel := map[string]string{"daytwo.dev/webapp": "shop"}
	held := controller.ApplyConfig[appsv1.Deployment](canaryDeployment(app, sel, podTemplate(app, podInputs{}), 1, st, true))
	if !held.Spec.Paused {
		t.Error("a held canary's Deployment is not paused: a long hold would leave ProgressDeadlineExceeded behind")
	}
	// Not paused, the apply leaves the field out: the live object read back
	// omits false, and an apply that stated it would never compare unchanged.
	ac := canaryDeployment(app, sel, podTemplate(app, podInputs{}), 1, st, false)
	if ac.Spec.Paused != nil {
		t.Errorf("spec.paused = %v in a running canary's apply, want it left out", *ac.Spec.Paused)
	}
}
