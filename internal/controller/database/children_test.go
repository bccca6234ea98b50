package database_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

func TestScaleSubresourceAndBudget(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "scaled")
	create(t, db)
	waitStatefulSet(t, ns, "scaled")
	if _, err := get(ns, "scaled-primary", &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("a single instance got the primary's PodDisruptionBudget: %v", err)
	}
	if _, err := get(ns, "scaled", &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("a single instance got a PodDisruptionBudget: %v", err)
	}
	// What `kubectl scale database/scaled --replicas=3` sends. (A GET of the
	// scale subresource answers only once spec.instances is set: the API
	// server does not know the tier's default.)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))
	if err := env.Client.SubResource("scale").Patch(ctx, db, patch, client.WithSubResourceBody(&autoscalingv1.Scale{})); err != nil {
		t.Fatalf("scale: %v", err)
	}
	eventually(t, "3 replicas and a budget", func() (bool, error) {
		sts, err := get(ns, "scaled", &appsv1.StatefulSet{})
		if err != nil || *sts.Spec.Replicas != 3 {
			return false, err
		}
		_, err = get(ns, "scaled", &policyv1.PodDisruptionBudget{})
		return err == nil, client.IgnoreNotFound(err)
	})
	eventually(t, "status.instances 3", func() (bool, error) {
		d, err := get(ns, "scaled", &v1alpha1.Database{})
		return err == nil && d.Status.Instances == 3, err
	})
}

// A retained volume with another Database's data: the pod says so in its
// termination message and the Database reports it; re-using the data is an
// annotation the instance manager receives as a flag.
func TestDataConflictIsReported(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "orders")
	create(t, db)
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "orders", sts); return err == nil, client.IgnoreNotFound(err) })
	args := strings.Join(sts.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--database-uid="+string(db.UID)) || !strings.Contains(args, "--bootstrap-source=initdb") ||
		strings.Contains(args, "--reuse-data") {
		t.Fatalf("instance manager args: %s", args)
	}
	fakeStatefulSetController(t, ns, "orders", "rev-1")
	pod, _ := get(ns, "orders-0", &corev1.Pod{})
	msg := "data conflict: the volume holds data of an earlier Database (uid x, bootstrap initdb); set the annotation daytwo.dev/reuse-data=true"
	updateStatus(t, pod, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "postgres", Image: postgres.DefaultImage("15"), ImageID: "x",
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}}}
	})
	db = waitCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDataConflict)
	if got := condition(db, v1alpha1.ConditionReady).Message; got != msg {
		t.Errorf("Ready message %q", got)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Annotations = map[string]string{v1alpha1.AnnotationReuseData: "true"} })
	eventually(t, "--reuse-data in the template", func() (bool, error) {
		s, err := get(ns, "orders", &appsv1.StatefulSet{})
		return err == nil && slices.Contains(s.Spec.Template.Spec.Containers[0].Args, "--reuse-data"), err
	})
}
