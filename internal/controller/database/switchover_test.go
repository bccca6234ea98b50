package database_test

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A scale-down never removes the primary's pod (the StatefulSet deletes
// the highest ordinals): it waits, saying so, for a switchover to move the
// primary to an instance that stays, and shrinks once the lease names one.
func TestScaleDownNeverRemovesThePrimary(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "db", func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](3) })
	create(t, db)
	lease := &coordinationv1.Lease{}
	eventually(t, "3 replicas and the primary lease", func() (bool, error) {
		sts, err := get(ns, "db", &appsv1.StatefulSet{})
		if err != nil || *sts.Spec.Replicas != 3 {
			return false, client.IgnoreNotFound(err)
		}
		_, err = get(ns, "db-primary", lease)
		return err == nil, client.IgnoreNotFound(err)
	})
	// db-2 is the primary, its lease valid for a minute.
	now := metav1.NewMicroTime(time.Now())
	update(t, lease, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To("db-2"), &now, &now
		l.Spec.LeaseDurationSeconds = ptr.To[int32](60)
	})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](2) })
	held := waitCondition(t, ns, "db", v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonSwitchoverPending)
	if c := condition(held, v1alpha1.ConditionProgressing); !strings.Contains(c.Message, "removes db-2, the primary") {
		t.Errorf("Progressing says %q", c.Message)
	}
	if sts, err := get(ns, "db", &appsv1.StatefulSet{}); err != nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("the StatefulSet shrank under its primary: %v replicas (%v)", ptr.Deref(sts.Spec.Replicas, 0), err)
	}
	// The switchover (the instances do it; envtest runs none) moves the lease.
	update(t, lease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("db-0") })
	eventually(t, "2 replicas once the primary stays", func() (bool, error) {
		sts, err := get(ns, "db", &appsv1.StatefulSet{})
		return err == nil && *sts.Spec.Replicas == 2, err
	})
}
