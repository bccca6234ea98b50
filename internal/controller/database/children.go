package database

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// validate finds spec errors only the controller can see.
func validate(db *v1alpha1.Database, p plan) string {
	if m := postgres.ImageMajor(p.image); m != "" && m != db.Spec.Version {
		return fmt.Sprintf("spec.image %s is PostgreSQL %s but spec.version is %s", p.image, m, db.Spec.Version)
	}
	if _, ok := p.resources.Limits[corev1.ResourceMemory]; !ok {
		if _, ok := p.resources.Requests[corev1.ResourceMemory]; !ok {
			return "spec.resources must set a memory limit or request: PostgreSQL is tuned from it"
		}
	}
	// The CRD refuses these too; a CRD not yet upgraded to a longer list
	// does not.
	for _, name := range slices.Sorted(maps.Keys(db.Spec.Parameters)) {
		if v1alpha1.IsManagedParameter(name) {
			return fmt.Sprintf("spec.parameters.%s is a setting daytwo manages; remove it", name)
		}
	}
	if p.syncReplicas > 0 && p.syncReplicas >= p.instances {
		return fmt.Sprintf("spec.replication.synchronous.number is %d but the Database has %d instances: "+
			"it must be below the number of instances, since the primary does not count", p.syncReplicas, p.instances)
	}
	return maintenanceProblem(db)
}

// metadataOf is an object of kind gvk as the metadata-only cache holds it.
func metadataOf(gvk schema.GroupVersionKind, namespace, name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	m.SetGroupVersionKind(gvk)
	return m
}

// checkChildren refuses to write over an object of a child's name that
// this Database does not control: another owner's, or one nobody controls
// unless the Database carries daytwo.dev/adopt=true (the next apply then
// makes the Database its controller).
func (r *Reconciler) checkChildren(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	ns := db.Namespace
	for _, c := range []struct {
		obj  client.Object
		kind string
	}{
		{metadataOf(corev1.SchemeGroupVersion.WithKind("ConfigMap"), ns, configName(db)), "ConfigMap"},
		{controller.Named[corev1.Service](ns, headlessName(db)), "Service"},
		{controller.Named[corev1.Service](ns, rwName(db)), "Service"},
		{controller.Named[corev1.Service](ns, roName(db)), "Service"},
		{controller.Named[appsv1.StatefulSet](ns, db.Name), "StatefulSet"},
		{controller.Named[policyv1.PodDisruptionBudget](ns, db.Name), "PodDisruptionBudget"},
		// A Lease left by an earlier Database of this name would name the
		// wrong primary.
		{controller.Named[coordinationv1.Lease](ns, leaseName(db)), "Lease"},
		{controller.Named[corev1.ServiceAccount](ns, instanceAccountName(db)), "ServiceAccount"},
		{controller.Named[rbacv1.Role](ns, instanceAccountName(db)), "Role"},
		{controller.Named[rbacv1.RoleBinding](ns, instanceAccountName(db)), "RoleBinding"},
	} {
		own, msg, err := controller.CheckOwner(ctx, r.Client, r.APIReader, db, "Database", c.obj, c.kind)
		switch {
		case err != nil:
			return err
		case own == controller.Conflicting:
			obs.found.conflict = msg
			return nil
		case own == controller.Adoptable:
			controller.Event(ctx, r.Recorder, db, c.obj, corev1.EventTypeNormal, "Adopted", "Adopt", "Adopted existing %s %s", c.kind, c.obj.GetName())
		}
	}
	return nil
}

func (r *Reconciler) applyConfigAndServices(ctx context.Context, db *v1alpha1.Database, p plan) error {
	// ConfigMaps are cached as metadata only; the rendered file is read from the API.
	if err := controller.ApplyIfChangedReading(ctx, r.APIReader, r.Client, controller.Named[corev1.ConfigMap](db.Namespace, configName(db)),
		configMap(db, p), corev1ac.ExtractConfigMap, "ConfigMap"); err != nil {
		return err
	}
	for name, role := range map[string]string{headlessName(db): "", rwName(db): "primary", roName(db): "replica"} {
		if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[corev1.Service](db.Namespace, name), service(db, name, role),
			corev1ac.ExtractService, "Service "+name); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) applyStatefulSet(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	if obs.found.keepStatefulSet {
		return nil
	}
	// One read serves both the instance manager decision and the comparison.
	live := controller.Named[appsv1.StatefulSet](db.Namespace, db.Name)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(live), live)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to get StatefulSet: %w", err)
	}
	if err == nil {
		keepInstanceManager(db, obs, live)
	}
	desired := statefulSet(db, obs.plan, obs.found.in)
	if err == nil {
		if held := shrinkHold(live, obs.plan, obs.Primary); held != nil {
			desired.Spec.Replicas, obs.ShrinkHeld = held, true
		}
	}
	if err != nil || !controller.Unchanged(live, desired, appsv1ac.ExtractStatefulSet) {
		if err := controller.Apply(ctx, r.Client, desired, "StatefulSet"); err != nil {
			return err
		}
	}
	if err == nil {
		obs.sts = live
	}
	return nil
}

// shrinkHold is the replica count to keep while a scale-down would remove
// the primary (the StatefulSet deletes the highest ordinals): the live
// one, until a switchover moves the primary to an instance that stays
// (switchoverForScaleDown). nil when the shrink may go ahead.
func shrinkHold(live *appsv1.StatefulSet, p plan, primary string) *int32 {
	if live == nil || live.Spec.Replicas == nil || *live.Spec.Replicas <= p.instances || primary == "" {
		return nil
	}
	if ha.Ordinal(primary) < int(p.instances) {
		return nil
	}
	return ptr.To(*live.Spec.Replicas)
}

// keepInstanceManager keeps the instance manager image the pods were made
// with while nothing else in their template changes, so a new operator
// restarts no PostgreSQL pod. The new instance manager comes with the next
// restart the pods need anyway (a minor upgrade, a restart-only setting,
// new resources), which rolls replicas first and switches over before the
// primary's turn.
func keepInstanceManager(db *v1alpha1.Database, obs *observation, live *appsv1.StatefulSet) {
	var kept string
	for _, c := range live.Spec.Template.Spec.InitContainers {
		if c.Name == containerInit {
			kept = c.Image
		}
	}
	if kept == "" || kept == obs.found.in.instanceImage {
		return
	}
	current, err := appsv1ac.ExtractStatefulSet(live, controller.FieldOwner)
	if err != nil || current.Spec == nil {
		return
	}
	in := obs.found.in
	in.instanceImage = kept
	if equality.Semantic.DeepEqual(current.Spec.Template, statefulSet(db, obs.plan, in).Spec.Template) {
		obs.found.in.instanceImage = kept
	}
}

// applyDisruptionBudget keeps two PodDisruptionBudgets while more than one
// instance runs: one instance at a time may go, and never the primary (see
// primaryDisruptionBudget). With one instance, a budget would block every
// node drain.
func (r *Reconciler) applyDisruptionBudget(ctx context.Context, db *v1alpha1.Database, p plan) error {
	for _, b := range []struct {
		name    string
		desired *policyv1ac.PodDisruptionBudgetApplyConfiguration
	}{{db.Name, podDisruptionBudget(db, p)}, {primaryBudgetName(db), primaryDisruptionBudget(db)}} {
		live := controller.Named[policyv1.PodDisruptionBudget](db.Namespace, b.name)
		var err error
		if p.instances > 1 {
			err = controller.ApplyIfChanged(ctx, r.Client, live, b.desired, policyv1ac.ExtractPodDisruptionBudget, "PodDisruptionBudget")
		} else {
			err = controller.DeleteOwned(ctx, r.Client, db, live, "PodDisruptionBudget")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// labelRoles marks the lease holder as the primary and the others as
// replicas, which is what the -rw and -ro Services select on; a pod
// fenced on request (fenced) is marked roleFenced, which neither Service
// nor the replicas' disruption budget selects.
//
// The new primary is labelled first: relabelling the old one first would
// leave -rw without endpoints for a moment, and kube-proxy, which syncs at
// most once a second, could apply that and then keep -rw empty for up to a
// second before it applies the new primary.
func (r *Reconciler) labelRoles(ctx context.Context, pods []corev1.Pod, primary string, fenced func(*corev1.Pod) bool) error {
	for _, primaryPass := range []bool{true, false} {
		for i := range pods {
			pod := &pods[i]
			if (pod.Name == primary) != primaryPass {
				continue
			}
			want := "replica"
			switch {
			case fenced(pod):
				want = roleFenced
			case pod.Name == primary:
				want = "primary"
			}
			if pod.Labels[labelRole] == want || !pod.DeletionTimestamp.IsZero() {
				continue
			}
			if err := r.patchPodMeta(ctx, pod, "labels", labelRole, want); err != nil {
				return err
			}
		}
	}
	return nil
}

// patchPodMeta sets one label or annotation (field) of pod with a merge
// patch; a pod already gone is no error.
func (r *Reconciler) patchPodMeta(ctx context.Context, pod *corev1.Pod, field, key, value string) error {
	patch := fmt.Sprintf(`{"metadata":{%q:{%q:%q}}}`, field, key, value)
	if err := r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to set %s %s on pod %s: %w", field, key, pod.Name, err)
	}
	return nil
}

// annConfig, on each instance pod, is the hash of the ConfigMap content the
// operator last applied. Changing it makes the kubelet sync the pod, and
// so refresh the ConfigMap volume at once instead of at its next periodic
// sync (a minute or more): a reloadable setting applies within seconds.
const annConfig = "daytwo.dev/config"

// nudgePods sets annConfig to hash on every pod that carries another.
func (r *Reconciler) nudgePods(ctx context.Context, pods []corev1.Pod, hash string) error {
	for i := range pods {
		pod := &pods[i]
		if pod.Annotations[annConfig] == hash || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.patchPodMeta(ctx, pod, "annotations", annConfig, hash); err != nil {
			return err
		}
	}
	return nil
}
