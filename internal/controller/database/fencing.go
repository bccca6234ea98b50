package database

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Fencing on request (spec.fencedInstances): each instance that answers
// is told whether it is fenced (internal/instance/fenceonrequest.go);
// one that does not answer is told once it does, and keeps its fence
// meanwhile (its data directory holds it).

// roleFenced is the role label of a pod fenced on request (see
// labelRoles): it is in no Service, and in neither disruption budget.
const roleFenced = "fenced"

// labelledFenced says whether pod carries the fenced role label.
func labelledFenced(pod *corev1.Pod) bool { return pod.Labels[labelRole] == roleFenced }

// fencedPod says whether pod is, or is to be, fenced on request: the spec
// names it, or its instance still says it is (a lifted fence holds until
// the instance lets postgres start again), or it is labelled so and its
// instance did not answer.
func fencedPod(db *v1alpha1.Database, obs *observation, pod *corev1.Pod) bool {
	s, answered := obs.Instances[pod.Name]
	// One that did not answer keeps its label: it may still be fenced.
	return fencedBySpec(db, pod.Name) || s.FencedOnRequest || (!answered && labelledFenced(pod))
}

// fencedBySpec says whether spec.fencedInstances fences the instance name.
func fencedBySpec(db *v1alpha1.Database, name string) bool {
	return slices.Contains(db.Spec.FencedInstances, "*") || slices.Contains(db.Spec.FencedInstances, name)
}

// fencePhase asks every instance whose fence differs from the spec to
// take it, or to lift it. An instance that cannot be asked (it does not
// answer, or runs a manager without the fence) is named in the Fenced
// condition and asked again at the next reconcile; nothing else waits on
// it.
func (r *Reconciler) fencePhase(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	names := slices.Sorted(maps.Keys(obs.Instances))
	var token string
	for _, name := range names {
		want := fencedBySpec(db, name)
		if obs.Instances[name].FencedOnRequest == want {
			continue
		}
		if want {
			// Out of the Services first: once postgres is down the pod
			// turns ready again (see instance.Manager.ready).
			if err := r.labelFenced(ctx, obs, name); err != nil {
				return err
			}
		}
		if err := r.askFence(ctx, db, obs, name, want, &token); err != nil {
			obs.found.fenceFailed = append(obs.found.fenceFailed, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		s := obs.Instances[name]
		s.FencedOnRequest = want
		obs.Instances[name] = s
		for i := range obs.InstanceStatuses {
			if obs.InstanceStatuses[i].Name == name {
				obs.InstanceStatuses[i].FencedOnRequest = want
			}
		}
	}
	return nil
}

// labelFenced gives the pod name the fenced role label.
func (r *Reconciler) labelFenced(ctx context.Context, obs *observation, name string) error {
	for i := range obs.Pods {
		if p := &obs.Pods[i]; p.Name == name && !labelledFenced(p) {
			return r.patchPodMeta(ctx, p, "labels", labelRole, roleFenced)
		}
	}
	return nil
}

// askFence asks the instance name to take its fence, or to lift it.
func (r *Reconciler) askFence(ctx context.Context, db *v1alpha1.Database, obs *observation, name string, want bool, token *string) error {
	if *token == "" {
		t, err := r.apiToken(ctx, db)
		if err != nil {
			return err
		}
		*token = t
	}
	t, err := r.targetOf(ctx, db, obs, name)
	if err != nil {
		return err
	}
	return r.Instances.Fence(ctx, t, *token, want)
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
	failed := ""
	if len(obs.found.fenceFailed) > 0 {
		failed = "; not fenced yet, asked again: " + strings.Join(obs.found.fenceFailed, ", ")
	}
	if len(fenced) == 0 {
		set(v1alpha1.ConditionFenced, false, v1alpha1.ReasonFencedOnRequest, "spec.fencedInstances names no instance of this Database"+failed)
		return
	}
	slices.Sort(fenced)
	set(v1alpha1.ConditionFenced, true, v1alpha1.ReasonFencedOnRequest, fmt.Sprintf("spec.fencedInstances fences %s: PostgreSQL stays stopped "+
		"there while the pods run on; remove them to lift the fence%s", strings.Join(fenced, ", "), failed))
}
