package database

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

// pod is ready, or not, for an hour before pickNow.
func pod(name, rev string, ready bool) *corev1.Pod {
	return podSince(name, rev, ready, pickNow.Add(-time.Hour))
}

func podSince(name, rev string, ready bool, since time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}}}
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(since)}}
	return p
}

func TestStillRouted(t *testing.T) {
	promoted := metav1.NewTime(pickNow.Add(-time.Second))
	rec := func(from string, result v1alpha1.SwitchoverResult) *v1alpha1.SwitchoverRecord {
		return &v1alpha1.SwitchoverRecord{From: from, To: "db-1", Result: result, PromotedTime: &promoted}
	}
	tests := []struct {
		name string
		last *v1alpha1.SwitchoverRecord
		pod  string
		want time.Duration
	}{
		{"the old primary waits out the grace", rec("db-0", v1alpha1.SwitchoverSucceeded), "db-0", routeGrace - time.Second},
		{"another pod does not wait", rec("db-0", v1alpha1.SwitchoverSucceeded), "db-2", 0},
		{"no switchover", nil, "db-0", 0},
		{"a failed switchover moved nothing", rec("db-0", v1alpha1.SwitchoverFailed), "db-0", 0},
		{"long after", &v1alpha1.SwitchoverRecord{From: "db-0", Result: v1alpha1.SwitchoverSucceeded,
			PromotedTime: &metav1.Time{Time: pickNow.Add(-time.Minute)}}, "db-0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stillRouted(tt.last, tt.pod, pickNow); got != tt.want {
				t.Errorf("stillRouted = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPickRestartOrder(t *testing.T) {
	tests := []struct {
		name     string
		outdated []*corev1.Pod
		allReady bool
		want     string
	}{
		{"replicas before the primary, highest first", []*corev1.Pod{pod("db-0", "a", true), pod("db-1", "a", true), pod("db-2", "a", true)}, true, "db-2"},
		{"the primary last", []*corev1.Pod{pod("db-0", "a", true)}, true, "db-0"},
		{"a broken outdated pod goes at once", []*corev1.Pod{pod("db-0", "a", true), pod("db-1", "a", false)}, false, "db-1"},
		{"a pod briefly not ready waits its turn", []*corev1.Pod{pod("db-0", "a", true), podSince("db-1", "a", false, pickNow.Add(-2*time.Second)),
			pod("db-2", "a", true)}, false, ""},
		{"wait while another instance is not ready", []*corev1.Pod{pod("db-0", "a", true), pod("db-1", "a", true)}, false, ""},
		{"ordinal 10 sorts after 9", []*corev1.Pod{pod("db-9", "a", true), pod("db-10", "a", true)}, true, "db-10"},
		{"after a failover the primary is db-2, still last", []*corev1.Pod{pod("db-2", "a", true), pod("db-0", "a", true), pod("db-1", "a", true)}, true, "db-1"},
		{"the new primary last", []*corev1.Pod{pod("db-2", "a", true), pod("db-0", "a", true)}, true, "db-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			primary := "db-0"
			if strings.Contains(tt.name, "failover") || strings.Contains(tt.name, "new primary") {
				primary = "db-2"
			}
			if p := pickRestart(tt.outdated, tt.allReady, primary, pickNow); p != nil {
				got = p.Name
			}
			if got != tt.want {
				t.Errorf("picked %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFailing(t *testing.T) {
	r := &Reconciler{UpgradeDeadline: time.Minute}
	now := time.Now()
	mk := func(image, waiting string, age time.Duration) corev1.Pod {
		p := pod("db-1", "b", false)
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		p.Spec.Containers = []corev1.Container{{Name: containerPostgres, Image: image}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerPostgres, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		}
		return *p
	}
	for _, tt := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"pull error fails at once", mk("pg:new", "ErrImagePull", time.Second), "pod db-1 is ErrImagePull"},
		{"crash loop fails at once", mk("pg:new", "CrashLoopBackOff", time.Second), "pod db-1 is CrashLoopBackOff"},
		{"starting within the deadline", mk("pg:new", "", 30*time.Second), ""},
		{"past the deadline", mk("pg:new", "", 2*time.Minute), "pod db-1 was not ready within 1m0s"},
		{"a pod on the old image does not count", mk("pg:old", "ErrImagePull", time.Hour), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obs := &observation{now: now, View: ha.View{Pods: []corev1.Pod{tt.pod}}, found: findings{templateImage: "pg:new"}}
			if got := r.failing(obs); got != tt.want {
				t.Errorf("failing = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPendingParameters(t *testing.T) {
	db := newDB(func(d *v1alpha1.Database) {
		d.Spec.Parameters = map[string]string{"shared_buffers": "64MB", "work_mem": "8MB"}
	})
	p := newPlan(db)
	old := pod("db-0", "a", true)
	old.Annotations = map[string]string{annRestartParameters: newPlan(newDB()).restartParameters()}
	if got := pendingParameters(p, "", []*corev1.Pod{old}); strings.Join(got, ",") != "shared_buffers" {
		t.Errorf("pending = %v, want shared_buffers only (work_mem reloads)", got)
	}
	if got := pendingParameters(p, newPlan(newDB()).restartParameters(), nil); strings.Join(got, ",") != "shared_buffers" {
		t.Errorf("pending = %v, want shared_buffers only (work_mem reloads)", got)
	}
}
