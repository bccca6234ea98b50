package database

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A declared kind's status: what the primary answered; else the last word
// per object, with one declared since Pending; the condition sums it up,
// and goes with the last declared object.
func TestReportDeclared(t *testing.T) {
	var conds []metav1.Condition
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&conds, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg})
	}
	r := declaredReport[v1alpha1.RoleStatus, v1alpha1.DatabaseRole]{
		what: "roles", condition: "C", applied: "Applied", failed: "Failed", pending: "Pending",
		specName:  func(r v1alpha1.DatabaseRole) string { return r.Name },
		state:     func(r v1alpha1.RoleStatus) (string, v1alpha1.RoleState, string) { return r.Name, r.State, r.Message },
		pendingOf: func(n string) v1alpha1.RoleStatus { return v1alpha1.RoleStatus{Name: n, State: v1alpha1.RolePending} },
	}
	spec := []v1alpha1.DatabaseRole{{Name: "a"}, {Name: "b"}}
	found := []v1alpha1.RoleStatus{{Name: "a", State: v1alpha1.RoleApplied}, {Name: "b", State: v1alpha1.RoleApplied}}
	got := reportDeclared(nil, found, spec, r, &conds, set)
	if c := meta.FindStatusCondition(conds, "C"); len(got) != 2 || c.Status != metav1.ConditionTrue || c.Message != "2 roles as spec.roles declares" {
		t.Fatalf("all applied: %+v, %+v", got, c)
	}
	// Not asked: a and b stand, c is Pending.
	spec = append(spec, v1alpha1.DatabaseRole{Name: "c"})
	got = reportDeclared(got, nil, spec, r, &conds, set)
	if c := meta.FindStatusCondition(conds, "C"); len(got) != 3 || got[0].State != v1alpha1.RoleApplied || got[2].State != v1alpha1.RolePending ||
		c.Reason != "Pending" || c.Message != "Waiting for a running primary to apply: c" {
		t.Fatalf("not asked: %+v, %+v", got, c)
	}
	// A failure wins over Pending.
	got[1] = v1alpha1.RoleStatus{Name: "b", State: v1alpha1.RoleFailed, Message: "owner of table t"}
	reportDeclared(got, nil, spec, r, &conds, set)
	if c := meta.FindStatusCondition(conds, "C"); c.Reason != "Failed" || c.Message != "Refused: b: owner of table t" {
		t.Fatalf("failed: %+v", c)
	}
	// Nothing declared: no list, no condition.
	if got := reportDeclared(got, nil, nil, r, &conds, set); got != nil || meta.FindStatusCondition(conds, "C") != nil {
		t.Fatalf("nothing declared: %+v, %+v", got, conds)
	}
}
