package database

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// declaredReport says how one kind of declared object (spec.roles,
// spec.databases) is reported: its condition and reasons, and how to read
// its spec and status entries.
type declaredReport[S, D any] struct {
	what                                string
	condition, applied, failed, pending string
	specName                            func(D) string
	state                               func(S) (name string, state v1alpha1.RoleState, message string)
	pendingOf                           func(name string) S
}

// reportDeclared is the status list of a declared kind and its condition:
// found when the primary was asked this reconcile; else the last word on
// each declared object stands, and one declared since is Pending. No
// object declared: no list, no condition.
func reportDeclared[S, D any](last, found []S, spec []D, r declaredReport[S, D], conds *[]metav1.Condition,
	set func(typ string, ok bool, reason, msg string)) []S {
	if len(spec) == 0 {
		meta.RemoveStatusCondition(conds, r.condition)
		return nil
	}
	out := found
	if out == nil {
		byName := map[string]S{}
		for _, s := range last {
			name, _, _ := r.state(s)
			byName[name] = s
		}
		out = make([]S, 0, len(spec))
		for _, d := range spec {
			s, ok := byName[r.specName(d)]
			if !ok {
				s = r.pendingOf(r.specName(d))
			}
			out = append(out, s)
		}
	}
	var failed, pending []string
	for _, s := range out {
		name, state, msg := r.state(s)
		switch state {
		case v1alpha1.RoleFailed:
			failed = append(failed, name+": "+msg)
		case v1alpha1.RolePending:
			pending = append(pending, name)
		}
	}
	switch {
	case len(failed) > 0:
		set(r.condition, false, r.failed, controller.Truncate("Refused: "+strings.Join(failed, "; "), 4096))
	case len(pending) > 0:
		set(r.condition, false, r.pending, "Waiting for a running primary to apply: "+strings.Join(pending, ", "))
	default:
		set(r.condition, true, r.applied, fmt.Sprintf("%d %s as spec.%s declares", len(out), r.what, r.what))
	}
	return out
}
