package database_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/operator"
)

func TestRestartOnlyChangeRollsThePod(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "app"))
	waitStatefulSet(t, ns, "app")
	fakeStatefulSetController(t, ns, "app", "rev-1")
	db := waitCondition(t, ns, "app", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAvailable)
	eventually(t, "pod 0 labelled primary", func() (bool, error) {
		p, err := get(ns, "app-0", &corev1.Pod{})
		return err == nil && p.Labels["daytwo.dev/role"] == "primary", err
	})
	if db.Status.Primary != "app-0" || db.Status.ReadyInstances != 1 {
		t.Errorf("status: primary %q ready %d", db.Status.Primary, db.Status.ReadyInstances)
	}

	// A reloadable setting changes the ConfigMap only: no new revision. The
	// reconcile of the new generation applies the StatefulSet before it
	// writes status.observedGeneration.
	sts, _ := get(ns, "app", &appsv1.StatefulSet{})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	eventually(t, "work_mem in the ConfigMap, generation observed", func() (bool, error) {
		cm, err := get(ns, "app-config", &corev1.ConfigMap{})
		if err != nil || !strings.Contains(cm.Data["postgresql.conf"], "work_mem = '8MB'") {
			return false, err
		}
		d, err := get(ns, "app", &v1alpha1.Database{})
		return err == nil && d.Status.ObservedGeneration == db.Generation, err
	})
	if now, _ := get(ns, "app", &appsv1.StatefulSet{}); now.Generation != sts.Generation {
		t.Errorf("a reloadable setting changed the pod template (generation %d -> %d)", sts.Generation, now.Generation)
	}

	// A restart-only one changes the template; the operator restarts pod 0.
	pod0, _ := get(ns, "app-0", &corev1.Pod{})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters["shared_buffers"] = "64MB" })
	eventually(t, "a new template generation", func() (bool, error) {
		now, err := get(ns, "app", &appsv1.StatefulSet{})
		return err == nil && now.Generation > sts.Generation, err
	})
	// Publish the new revision but keep pod 0 on the old one.
	updateStatus(t, sts, func(s *appsv1.StatefulSet) {
		s.Status.ObservedGeneration, s.Status.UpdateRevision = s.Generation, "rev-2"
	})
	eventually(t, "pod 0 restarted", func() (bool, error) {
		p, err := get(ns, "app-0", &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && (p.UID != pod0.UID || !p.DeletionTimestamp.IsZero()), err
	})
	db = waitCondition(t, ns, "app", v1alpha1.ConditionPendingRestart, metav1.ConditionTrue, v1alpha1.ReasonRestartRequired)
	if msg := condition(db, v1alpha1.ConditionPendingRestart).Message; !strings.Contains(msg, "shared_buffers") || strings.Contains(msg, "work_mem") {
		t.Errorf("PendingRestart message = %q", msg)
	}
	fakeStatefulSetController(t, ns, "app", "rev-2")
	waitCondition(t, ns, "app", v1alpha1.ConditionPendingRestart, metav1.ConditionFalse, v1alpha1.ReasonUpToDate)
}

// An operator upgrade restarts no PostgreSQL pod: a StatefulSet made by an
// earlier operator (another instance manager image) keeps that image while
// nothing else in the pod template changes, and takes the new one with the
// next change that restarts the pods anyway.
func TestOperatorUpgradeKeepsTheInstanceManager(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "keep"))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "keep", sts); return err == nil, client.IgnoreNotFound(err) })
	initImage := func() string {
		if _, err := get(ns, "keep", sts); err != nil {
			t.Fatal(err)
		}
		return sts.Spec.Template.Spec.InitContainers[0].Image
	}
	current := initImage()
	if current != operator.DefaultInstanceImage() {
		t.Fatalf("init container image %s, want the operator's %s", current, operator.DefaultInstanceImage())
	}

	// What an older operator applied: the same template with its own
	// image.
	const older = "localhost/daytwo:older"
	ac, err := appsv1ac.ExtractStatefulSet(sts, controller.FieldOwner)
	if err != nil {
		t.Fatal(err)
	}
	ac.Spec.Template.Spec.InitContainers[0].Image = ptr.To(older)
	if err := env.Client.Apply(ctx, ac, client.FieldOwner(controller.FieldOwner), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}

	// A change outside the pod template: the older image stays.
	db := &v1alpha1.Database{}
	if _, err := get(ns, "keep", db); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete })
	eventually(t, "the change observed", func() (bool, error) {
		_, err := get(ns, "keep", db)
		return err == nil && db.Status.ObservedGeneration == db.Generation, err
	})
	if got := initImage(); got != older {
		t.Fatalf("a reconcile with an unchanged template moved the instance manager to %s", got)
	}

	// A restart-only setting rolls the pods anyway, with the operator's
	// image.
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"max_connections": "150"} })
	eventually(t, "the new instance manager with the restart", func() (bool, error) { return initImage() == current, nil })
}
