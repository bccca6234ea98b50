package database

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Fencing on request (spec.fencedInstances): each instance that answers
// is told whether it is fenced (internal/instance/fenceonrequest.go);
// one that does not answer is told once it does, and keeps its fence
// meanwhile (its data directory holds it).

// fencedBySpec says whether spec.fencedInstances fences the instance name.
func fencedBySpec(db *v1alpha1.Database, name string) bool {
	return slices.Contains(db.Spec.FencedInstances, "*") || slices.Contains(db.Spec.FencedInstances, name)
}

// fencePhase asks every instance whose fence differs from the spec to
// take it, or to lift it.
func (r *Reconciler) fencePhase(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	names := make([]string, 0, len(obs.Instances))
	for name := range obs.Instances {
		names = append(names, name)
	}
	slices.Sort(names)
	var token string
	for _, name := range names {
		want := fencedBySpec(db, name)
		if obs.Instances[name].FencedOnRequest == want {
			continue
		}
		if token == "" {
			var err error
			if token, err = r.apiToken(ctx, db); err != nil {
				return err
			}
		}
		t, err := r.targetOf(ctx, db, obs, name)
		if err != nil {
			return err
		}
		if err := r.Instances.Fence(ctx, t, token, want); err != nil {
			return fmt.Errorf("failed to set the fence of %s to %t: %w", name, want, err)
		}
		s := obs.Instances[name]
		s.FencedOnRequest = want
		obs.Instances[name] = s
	}
	return nil
}

// setFencedCondition says which instances are fenced on request.
func setFencedCondition(db *v1alpha1.Database, obs *observation, set func(string, bool, string, string)) {
	if len(db.Spec.FencedInstances) == 0 {
		meta.RemoveStatusCondition(&db.Status.Conditions, v1alpha1.ConditionFenced)
		return
	}
	var fenced []string
	for _, p := range obs.Pods {
		if fencedBySpec(db, p.Name) {
			fenced = append(fenced, p.Name)
		}
	}
	if len(fenced) == 0 {
		set(v1alpha1.ConditionFenced, false, v1alpha1.ReasonFencedOnRequest, "spec.fencedInstances names no instance of this Database")
		return
	}
	slices.Sort(fenced)
	set(v1alpha1.ConditionFenced, true, v1alpha1.ReasonFencedOnRequest, fmt.Sprintf("spec.fencedInstances fences %s: PostgreSQL stays stopped "+
		"there while the pods run on; remove them to lift the fence", strings.Join(fenced, ", ")))
}
