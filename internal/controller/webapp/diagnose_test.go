package webapp

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

func podWith(name string, st corev1.ContainerStatus) corev1.Pod {
	st.Name = containerName
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{st}},
	}
}

func waiting(reason, msg string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
}

func TestDiagnose(t *testing.T) {
	running := podWith("ok", corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	pull := podWith("p1", corev1.ContainerStatus{Image: "shop:9", State: waiting("ImagePullBackOff", `Back-off pulling image "shop:9"`)})
	root := podWith("p2", corev1.ContainerStatus{State: waiting("CreateContainerConfigError",
		"container has runAsNonRoot and image will run as root (pod: \"web-1_ns(uid)\", container: app)")})
	crash := podWith("p3", corev1.ContainerStatus{RestartCount: 4, State: waiting("CrashLoopBackOff", "back-off 40s restarting failed container"),
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
			Message: "starting\n\n2026/11/25 [emerg] 1#1: bind() to 0.0.0.0:80 failed (13: Permission denied)\nnginx: [emerg] bind() to 0.0.0.0:80 failed (13: Permission denied)\n"}}})
	oom := podWith("p4", corev1.ContainerStatus{RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}})
	pending := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p5"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}}}
	tests := []struct {
		name   string
		pods   []corev1.Pod
		reason string
		want   []string
	}{
		{name: "healthy", pods: []corev1.Pod{running}},
		{name: "image pull", pods: []corev1.Pod{running, pull}, reason: v1alpha1.ReasonImagePullFailed, want: []string{"p1", "shop:9", "ImagePullBackOff"}},
		{name: "root image", pods: []corev1.Pod{root}, reason: v1alpha1.ReasonContainerConfigError,
			want: []string{"will run as root", "spec.securityContext.runAsNonRoot: false"}},
		{name: "crash loop with the container's words", pods: []corev1.Pod{crash}, reason: v1alpha1.ReasonCrashLoopBackOff,
			want: []string{"keeps exiting", "exit code 1", "starting | 2026/11/25 [emerg]", "(13: Permission denied)"}},
		{name: "OOM killed, running again", pods: []corev1.Pod{oom}, reason: v1alpha1.ReasonOOMKilled, want: []string{"64Mi", "spec.resources.limits.memory"}},
		{name: "unschedulable", pods: []corev1.Pod{pending}, reason: v1alpha1.ReasonUnschedulable, want: []string{"Insufficient cpu"}},
		{name: "what to fix first: the image, then the crash", pods: []corev1.Pod{crash, pending, pull}, reason: v1alpha1.ReasonImagePullFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := diagnose(tt.pods, "")
			if tt.reason == "" {
				if got != nil {
					t.Fatalf("diagnose = %+v, want nothing", *got)
				}
				return
			}
			if got == nil || got.reason != tt.reason {
				t.Fatalf("diagnose = %+v, want reason %s", got, tt.reason)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.message, w) {
					t.Errorf("message %q lacks %q", got.message, w)
				}
			}
		})
	}
}

func TestDiagnosePrefersTheCurrentTemplate(t *testing.T) {
	old := podWith("old", corev1.ContainerStatus{State: waiting("CreateContainerConfigError", "container has runAsNonRoot and image will run as root")})
	old.Annotations = map[string]string{annotationTemplateHash: "v1"}
	crash := podWith("new", corev1.ContainerStatus{State: waiting("CrashLoopBackOff", ""),
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "chown failed"}}})
	crash.Annotations = map[string]string{annotationTemplateHash: "v2"}
	if got := diagnose([]corev1.Pod{old, crash}, "v2"); got == nil || got.reason != v1alpha1.ReasonCrashLoopBackOff {
		t.Fatalf("diagnose = %+v, want the current template's crash loop over the old pod's config error", got)
	}
	if got := diagnose([]corev1.Pod{old}, "v2"); got == nil || got.reason != v1alpha1.ReasonContainerConfigError {
		t.Fatalf("diagnose = %+v, want the old pod's problem when the current ones have none", got)
	}
}

func TestLastWordsKeepTheEnd(t *testing.T) {
	long := strings.Repeat("é", 400) // 800 bytes, two per rune
	got := lastWords("a\nb\nc\nd\n" + long)
	if len(got) > 512 || !strings.HasPrefix(got, "...") || !strings.HasSuffix(got, "é") || strings.Contains(got, "b |") {
		t.Fatalf("lastWords = %q (%d bytes)", got, len(got))
	}
	if got := lastWords("one\n\n  \ntwo\nthree\nfour\n"); got != "two | three | four" {
		t.Fatalf("lastWords = %q", got)
	}
}

func TestStuckFor(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	progressed := func(ago time.Duration) *appsv1.Deployment {
		return &appsv1.Deployment{Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, LastUpdateTime: metav1.NewTime(now.Add(-ago))}}}}
	}
	for _, tt := range []struct {
		name    string
		d       *appsv1.Deployment
		seenAgo time.Duration
		want    time.Duration
	}{
		{"a rollout with no progress for a minute", progressed(time.Minute), 2 * time.Minute, time.Minute},
		{"a long-settled Deployment that just lost a pod", progressed(72 * time.Hour), 0, 0},
		{"seen unsettled 20 s ago, its last rollout days ago", progressed(72 * time.Hour), 20 * time.Second, 20 * time.Second},
		{"no Progressing condition", &appsv1.Deployment{}, 5 * time.Second, 5 * time.Second},
	} {
		if got := stuckFor(tt.d, now, now.Add(-tt.seenAgo)); got != tt.want {
			t.Errorf("%s: stuckFor = %v, want %v", tt.name, got, tt.want)
		}
	}
	if settled(&appsv1.Deployment{Status: appsv1.DeploymentStatus{Replicas: 4, UpdatedReplicas: 1}}) {
		t.Error("a rollout with old pods left is settled")
	}
}

func TestPodSecurityOfTheTemplate(t *testing.T) {
	in := podInputs{selector: selectorLabels(testApp(nil))}
	def := controller.ApplyConfig[corev1.PodTemplateSpec](podTemplate(testApp(nil), in))
	root := controller.ApplyConfig[corev1.PodTemplateSpec](podTemplate(testApp(func(a *v1alpha1.WebApp) {
		a.Spec.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "SETUID", "SETGID", "NET_BIND_SERVICE"}}}
	}), in))
	privileged := controller.ApplyConfig[corev1.PodTemplateSpec](podTemplate(testApp(func(a *v1alpha1.WebApp) {
		a.Spec.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true), AllowPrivilegeEscalation: ptr.To(true)}
	}), in))
	enforce := func(level string) map[string]string {
		return map[string]string{"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/warn": "restricted"}
	}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		t      *corev1.PodTemplateSpec
		want   []string // nil: allowed
	}{
		{"the default passes restricted", enforce("restricted"), def, nil},
		{"root with capabilities passes baseline", enforce("baseline"), root, nil},
		{"root is refused by restricted", enforce("restricted"), root,
			[]string{`"restricted:latest"`, "runAsNonRoot", "runAsUser=0", "CHOWN", "spec.securityContext"}},
		{"privileged is refused by baseline", enforce("baseline"), privileged, []string{`"baseline:latest"`, "privileged"}},
		{"no label: privileged", nil, privileged, nil},
		{"a bad label is restricted", enforce("strict"), root, []string{"restricted"}},
	} {
		got := podSecurity("ns", tt.labels, tt.t)
		if (got == "") != (tt.want == nil) {
			t.Errorf("%s: podSecurity = %q", tt.name, got)
			continue
		}
		if got != "" {
			t.Logf("%s: %s", tt.name, got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tt.name, got, w)
			}
		}
	}
	// The override keeps what it does not name.
	c := root.Spec.Containers[0]
	if p := c.SecurityContext.AllowPrivilegeEscalation; p == nil || *p || root.Spec.SecurityContext.SeccompProfile == nil ||
		!*root.Spec.SecurityContext.RunAsNonRoot || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Fatalf("the override lost a default: %+v, pod %+v", c, root.Spec.SecurityContext)
	}
}

func TestRevisionIgnoresWhatDoesNotReachThePods(t *testing.T) {
	in := podInputs{selector: selectorLabels(testApp(nil)), configHash: "abc"}
	base := revisionOf(testApp(nil), in)
	if got := revisionOf(testApp(func(a *v1alpha1.WebApp) {
		a.Spec.Replicas = ptr.To[int32](7)
		a.Spec.Rollout = &v1alpha1.WebAppRollout{ProgressDeadlineSeconds: 30}
		a.Spec.DeletionPolicy = v1alpha1.WebAppDeletionOrphan
	}), in); got != base {
		t.Errorf("scaling or rollout settings changed the revision")
	}
	for name, other := range map[string]string{
		"image": revisionOf(testApp(func(a *v1alpha1.WebApp) { a.Spec.Image = "shop:2" }), in),
		"security": revisionOf(testApp(func(a *v1alpha1.WebApp) {
			a.Spec.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](1)}
		}), in),
		"config content": revisionOf(testApp(nil), podInputs{selector: in.selector, configHash: "def"}),
	} {
		if other == base {
			t.Errorf("a new %s kept the revision", name)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"dial postgres://app:s3cr3t@shop-rw:5432/app failed", "dial postgres://app:[REDACTED]@shop-rw:5432/app failed"},
		{"DATABASE_URL=postgresql://app:p%40ss@db/app?sslmode=verify-full", "DATABASE_URL=postgresql://app:[REDACTED]@db/app?sslmode=verify-full"},
		{"PGPASSWORD=hunter2 psql", "PGPASSWORD=[REDACTED] psql"},
		{`config: {"api_key": "abc123", "port": 80}`, `config: {"api_key": [REDACTED], "port": 80}`},
		{"token: eyJhbGciOi, user: app", "token: [REDACTED], user: app"},
		{"AWS_SECRET_ACCESS_KEY='x y z' next", "AWS_SECRET_ACCESS_KEY=[REDACTED] next"},
		{"password=a&host=b", "password=[REDACTED]&host=b"},
		{"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "Authorization: Bearer [REDACTED]"},
		{`body {\"password\":\"x y\"}`, `body {\"password\":[REDACTED]}`},
		// What is no secret stays as it is.
		{"open /var/run/secrets/kubernetes.io/serviceaccount/token: no such file or directory",
			"open /var/run/secrets/kubernetes.io/serviceaccount/token: no such file or directory"},
		{"POSTGRES_PASSWORD_FILE=/run/secrets/pw is empty", "POSTGRES_PASSWORD_FILE=/run/secrets/pw is empty"},
		{"missing token:\npanic: boom", "missing token:\npanic: boom"},
		{`FATAL:  password authentication failed for user "app"`, `FATAL:  password authentication failed for user "app"`},
		{"listen tcp :80: bind: permission denied", "listen tcp :80: bind: permission denied"},
		{"GET http://shop:8080/healthz: 500", "GET http://shop:8080/healthz: 500"},
	} {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("redact(%q)\n  = %q\nwant %q", tt.in, got, tt.want)
		}
	}
	if got := lastWords("starting\npanic: connect postgres://app:pw@db/app: refused"); strings.Contains(got, ":pw@") {
		t.Errorf("lastWords kept the password: %q", got)
	}
}
