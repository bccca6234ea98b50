package webapp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/sets"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

const revisionAnnotation = "deployment.kubernetes.io/revision"

// checkOwnership looks for children of app's name (Deployment, Service,
// HPA, PDB, Ingress) that app does not control. One is adopted when app
// carries daytwo.dev/adopt=true and nothing else controls it; otherwise the
// returned message explains the conflict, and daytwo writes and deletes
// none of them. It also returns the pod selector: a Deployment's selector
// is immutable, so an adopted one keeps its own and pods do not restart.
func (r *Reconciler) checkOwnership(ctx context.Context, app *v1alpha1.WebApp) (string, map[string]string, error) {
	sel := selectorLabels(app)
	dep := controller.Named[appsv1.Deployment](app.Namespace, app.Name)
	for _, obj := range []client.Object{dep, controller.Named[corev1.Service](app.Namespace, app.Name),
		controller.Named[autoscalingv2.HorizontalPodAutoscaler](app.Namespace, app.Name),
		controller.Named[policyv1.PodDisruptionBudget](app.Namespace, app.Name),
		controller.Named[networkingv1.Ingress](app.Namespace, app.Name)} {
		kind := kindOf(obj)
		own, msg, err := controller.CheckOwner(ctx, r.Client, r.APIReader, app, "WebApp", obj, kind)
		if err != nil || own == controller.Conflicting {
			return msg, nil, err
		}
		if own == controller.Absent {
			continue
		}
		if obj == dep && dep.Spec.Selector != nil {
			if len(dep.Spec.Selector.MatchExpressions) > 0 {
				return fmt.Sprintf("Deployment %s selects pods with matchExpressions, which daytwo cannot take over", app.Name), nil, nil
			}
			sel = dep.Spec.Selector.MatchLabels
		}
		if own == controller.Adoptable {
			if err := r.takeOver(ctx, obj); err != nil {
				return "", nil, err
			}
			controller.Event(ctx, r.Recorder, app, obj, corev1.EventTypeNormal, "Adopted", "Adopt", "Adopted existing %s %s", kind, app.Name)
		}
	}
	return "", sel, nil
}

// takeOver makes daytwo the only owner of the fields other clients wrote to
// obj with create, update or client-side apply, so daytwo's next apply also
// removes what the WebApp does not ask for (an old container, say). It reads
// through the API: the cache drops managed fields.
func (r *Reconciler) takeOver(ctx context.Context, obj client.Object) error {
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return fmt.Errorf("failed to get %s %s: %w", kindOf(obj), obj.GetName(), err)
	}
	managers := sets.New[string]()
	for _, f := range obj.GetManagedFields() {
		if f.Operation == metav1.ManagedFieldsOperationUpdate && f.Subresource == "" {
			managers.Insert(f.Manager)
		}
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(obj, managers, fieldOwner)
	if err != nil || patch == nil {
		return err
	}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("failed to take over %s %s: %w", kindOf(obj), obj.GetName(), err)
	}
	return nil
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *corev1.Service:
		return "Service"
	case *autoscalingv2.HorizontalPodAutoscaler:
		return "HorizontalPodAutoscaler"
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	case *networkingv1.Ingress:
		return "Ingress"
	}
	return fmt.Sprintf("%T", obj)
}

// errCacheBehind: the informer cache has not yet seen the Deployment this
// controller last applied. The reconcile stops without an error (which
// would back off, and count as one) and without a status write; the
// Deployment's watch event brings it back.
var errCacheBehind = errors.New("the cache has not seen the last applied Deployment yet")

// cacheBehindFor bounds the wait for the cache: a Deployment deleted right
// after the apply never reaches it at that generation.
const cacheBehindFor = 10 * time.Second

// appliedDeployment is what an apply of the Deployment returned: its UID,
// resource version and generation, and when.
type appliedDeployment struct {
	uid             types.UID
	resourceVersion string
	generation      int64
	at              time.Time
}

// recordApplied remembers, when the apply configuration ac holds an API
// server's answer (an apply was sent), the Deployment it returned for key,
// and says whether it did.
func (r *Reconciler) recordApplied(key client.ObjectKey, ac *appsv1ac.DeploymentApplyConfiguration, now time.Time) bool {
	if ac.Generation == nil {
		return false
	}
	r.applied.Store(key, appliedDeployment{uid: ptr.Deref(ac.UID, ""), resourceVersion: ptr.Deref(ac.ResourceVersion, ""),
		generation: *ac.Generation, at: now})
	return true
}

// cacheBehind says whether live, read from the cache, is older than the
// Deployment last applied for key (a read of one's own write the cache
// has not caught up with): its resource version, or where that cannot be
// compared its generation, is older. A write that changed only metadata
// (a canary abort's annotations) counts too. Another object by that name
// (deleted and made again) is not behind. The record goes once the cache
// has caught up, or after cacheBehindFor.
func (r *Reconciler) cacheBehind(key client.ObjectKey, live *appsv1.Deployment, exists bool, now time.Time) bool {
	v, ok := r.applied.Load(key)
	if !ok {
		return false
	}
	a := v.(appliedDeployment)
	caughtUp := false
	if exists {
		cmp, err := resourceversion.CompareResourceVersion(live.ResourceVersion, a.resourceVersion)
		caughtUp = live.UID != a.uid || (err == nil && cmp >= 0) || (err != nil && live.Generation >= a.generation)
	}
	if caughtUp || now.Sub(a.at) > cacheBehindFor {
		r.applied.CompareAndDelete(key, v)
		return false
	}
	return true
}

// applyDeployment applies the Deployment and handles rollback: a spec revision
// whose rollout missed its progress deadline, or whose canary was aborted,
// is replaced by the previous revision's template, and stays replaced until
// the spec changes again. With the Canary strategy the Deployment keeps its
// template while a canary runs beside it (runCanary), and takes the new
// one when the canary is promoted.
func (r *Reconciler) applyDeployment(ctx context.Context, app *v1alpha1.WebApp, in podInputs) (rollout, error) {
	desired := podTemplate(app, in)
	desiredHash := desired.Annotations[annotationTemplateHash]
	revision := revisionOf(app, in)
	live := &appsv1.Deployment{}
	key := client.ObjectKeyFromObject(app)
	err := r.Client.Get(ctx, key, live)
	if err != nil && !apierrors.IsNotFound(err) {
		return rollout{}, fmt.Errorf("failed to get Deployment: %w", err)
	}
	exists := err == nil
	if r.cacheBehind(key, live, exists, r.Clock.Now()) {
		return rollout{}, errCacheBehind
	}
	if err := r.seedReplicas(ctx, app, live, exists); err != nil {
		return rollout{}, err
	}
	ro := rollout{desiredImage: app.Spec.Image}
	if ro.forbidden, err = r.podSecurityViolation(ctx, app.Namespace, desired); err != nil {
		return rollout{}, err
	}
	if ro.forbidden != "" && !exists {
		return ro, nil // nothing runs yet; the condition says why nothing will
	}
	changed := exists && templateHash(live) != desiredHash
	held := failure{revision: live.Annotations[annotationFailedTemplate], signal: live.Annotations[annotationCanaryAborted]}
	template, failed, paused := desired, failure{}, false
	var recorded *corev1ac.PodTemplateSpecApplyConfiguration
	if !exists {
		// A Deployment deleted after a failure is made again with the good
		// template, not the failed revision.
		if held, recorded, err = r.recordedFailure(ctx, app, revision); err != nil {
			return rollout{}, err
		}
	}
	// The event describing this apply is recorded only once the apply succeeded.
	event := func() {}
	switch {
	case ro.forbidden != "":
		// Keep what runs, and the record of a failed revision: the API
		// server would refuse every new pod.
		if template, err = r.liveTemplate(ctx, live); err != nil {
			return rollout{}, err
		}
		failed, ro.failedHash = held, held.revision
	case recorded != nil:
		template, failed, ro.failedHash, ro.abortSignal = recorded, held, revision, held.signal
		ro.restoredImage = imageOf(controller.ApplyConfig[corev1.PodTemplateSpec](recorded))
		event = func() {
			controller.Event(ctx, r.Recorder, app, nil, corev1.EventTypeWarning, v1alpha1.ReasonRolledBack, "Recreate",
				"Made Deployment %s again with the last good template (%s): revision %s of the spec failed before", app.Name,
				ro.restoredImage, revision)
		}
	case exists && held.revision == revision:
		// Rolled back before: keep the live (good) template, do not retry the failed one.
		if template, err = r.liveTemplate(ctx, live); err != nil {
			return rollout{}, err
		}
		failed, ro.failedHash, ro.abortSignal, ro.restoredImage = held, revision, held.signal, templateImage(live)
	case changed && isCanary(app):
		if template, failed, event, err = r.canaryRollout(ctx, app, in, live, desired, revision, &ro); err != nil {
			return rollout{}, err
		}
		// The stable pods may still be rolling to an earlier promotion:
		// that rollout holds too.
		paused = in.databaseHold != "" && !rolledOut(live)
	case exists && in.databaseHold != "" && (changed || !rolledOut(live)):
		// Hold the rollout where it is until the Database is back.
		if changed {
			if template, err = r.liveTemplate(ctx, live); err != nil {
				return rollout{}, err
			}
		}
		paused, ro.databaseHold = true, in.databaseHold
	case exists && deadlineExceeded(live) && !changed:
		prev, err := r.previousTemplate(ctx, live)
		if err != nil {
			return rollout{}, err
		}
		ro.deadlineExceeded = true
		if prev != nil {
			template = controller.ApplyConfig[corev1ac.PodTemplateSpecApplyConfiguration](prev)
			failed, ro.failedHash, ro.restoredImage = failure{revision: revision}, revision, imageOf(prev)
			event = func() {
				controller.CountRollback("WebApp", app)
				controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeWarning, v1alpha1.ReasonRolledBack, "Rollback",
					"Image %s missed its progress deadline; rolled back to %s", app.Spec.Image, imageOf(prev))
			}
		}
	case changed:
		event = func() {
			controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeNormal, v1alpha1.ReasonRollingOut, "RollOut", "Rolling out image %s", app.Spec.Image)
		}
	}
	// A new WebApp's Deployment gets no Event: its status says as much,
	// and at scale an Event per WebApp was a write to the API server and
	// about 2.5 KB of the operator's heap for the 6 minutes the events
	// library keeps each one.
	live.Namespace, live.Name = app.Namespace, app.Name
	dep := deployment(app, in.selector, template, failed, paused)
	if err := controller.ApplyIfChanged(ctx, r.Client, live, dep, appsv1ac.ExtractDeployment, "Deployment"); err != nil {
		return rollout{}, err
	}
	if r.recordApplied(key, dep, r.Clock.Now()) {
		// Applied: dep holds the API server's answer, which the cache has
		// not seen yet. This reconcile goes on with the answer, and later
		// ones wait until the cache holds it.
		live = controller.ApplyConfig[appsv1.Deployment](dep)
	} else if live.UID == "" {
		return rollout{}, errors.New("failed to get Deployment: neither read nor applied")
	}
	// The failure, or none, recorded beyond the Deployment too.
	if err := r.syncFailedRecord(ctx, app, failed, template); err != nil {
		return rollout{}, err
	}
	event()
	ro.deployment = live
	if ro.canary == nil && exists {
		ro.canary, err = r.settleCanary(ctx, app, live, desiredHash)
	}
	return ro, err
}

// canaryRollout runs the canary of desired and returns what the stable
// Deployment applies: its live template while the canary runs or after an
// abort (with the failure recorded), desired once it is promoted. The
// stable Deployment is read from the API server first: a cache that has
// not yet seen the last promotion or abort must not run the canary again.
func (r *Reconciler) canaryRollout(ctx context.Context, app *v1alpha1.WebApp, in podInputs, live *appsv1.Deployment,
	desired *corev1ac.PodTemplateSpecApplyConfiguration, revision string, ro *rollout) (*corev1ac.PodTemplateSpecApplyConfiguration, failure, func(), error) {
	full := &appsv1.Deployment{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(live), full); err != nil {
		return nil, failure{}, nil, fmt.Errorf("failed to get Deployment %s: %w", live.Name, err)
	}
	liveTemplate := controller.ApplyConfig[corev1ac.PodTemplateSpecApplyConfiguration](&full.Spec.Template)
	switch {
	case full.Spec.Template.Annotations[annotationTemplateHash] == desired.Annotations[annotationTemplateHash]:
		return desired, failure{}, func() {}, nil // promoted already; settleCanary finishes
	case full.Annotations[annotationFailedTemplate] == revision:
		held := failure{revision: revision, signal: full.Annotations[annotationCanaryAborted]}
		ro.failedHash, ro.abortSignal, ro.restoredImage = revision, held.signal, imageOf(&full.Spec.Template)
		return liveTemplate, held, func() {}, nil
	}
	cr, err := r.runCanary(ctx, app, in, live, desired, r.Clock.Now())
	if err != nil {
		return nil, failure{}, nil, err
	}
	ro.canary = &cr
	switch {
	case cr.promote:
		return desired, failure{}, func() {
			controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeNormal, v1alpha1.ReasonCanaryPromoting, "PromoteCanary",
				"Canary of image %s passed; the stable pods roll to it", app.Spec.Image)
		}, nil
	case !cr.aborted:
		return liveTemplate, failure{}, func() {}, nil
	}
	ro.failedHash, ro.abortSignal, ro.restoredImage = revision, cr.message, imageOf(&full.Spec.Template)
	return liveTemplate, failure{revision: revision, signal: cr.message}, func() {
		controller.CountRollback("WebApp", app)
		controller.Event(ctx, r.Recorder, app, live, corev1.EventTypeWarning, v1alpha1.ReasonCanaryAborted, "AbortCanary",
			"Canary of image %s aborted, the stable pods keep %s: %s", app.Spec.Image, ro.restoredImage, controller.Truncate(cr.message, 512))
	}, nil
}

// liveTemplate is d's pod template as the API server holds it: the cache
// keeps only its annotations and each container's image (see
// operator.CacheOptions).
func (r *Reconciler) liveTemplate(ctx context.Context, d *appsv1.Deployment) (*corev1ac.PodTemplateSpecApplyConfiguration, error) {
	full := &appsv1.Deployment{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(d), full); err != nil {
		return nil, fmt.Errorf("failed to get Deployment %s: %w", d.Name, err)
	}
	return controller.ApplyConfig[corev1ac.PodTemplateSpecApplyConfiguration](&full.Spec.Template), nil
}

// deadlineExceeded reports whether the Deployment controller gave up on the
// current template.
func deadlineExceeded(d *appsv1.Deployment) bool {
	if d.Status.ObservedGeneration < d.Generation {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			return c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded"
		}
	}
	return false
}

// previousTemplate is the pod template of the newest ReplicaSet of d older
// than the current revision, or nil when there is none. ReplicaSets are read
// without the cache: this runs only during a rollback, and caching every
// ReplicaSet in the cluster would cost memory all the time.
func (r *Reconciler) previousTemplate(ctx context.Context, d *appsv1.Deployment) (*corev1.PodTemplateSpec, error) {
	current, _ := strconv.Atoi(d.Annotations[revisionAnnotation])
	rss := &appsv1.ReplicaSetList{}
	if err := r.APIReader.List(ctx, rss, client.InNamespace(d.Namespace), client.MatchingLabels(SelectorOf(d))); err != nil {
		return nil, fmt.Errorf("failed to list ReplicaSets: %w", err)
	}
	var best *appsv1.ReplicaSet
	bestRev := 0
	for i := range rss.Items {
		rs := &rss.Items[i]
		if owner := metav1.GetControllerOf(rs); owner == nil || owner.UID != d.UID {
			continue
		}
		rev, _ := strconv.Atoi(rs.Annotations[revisionAnnotation])
		if rev < current && rev > bestRev {
			best, bestRev = rs, rev
		}
	}
	if best == nil {
		return nil, nil
	}
	t := best.Spec.Template.DeepCopy()
	delete(t.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return t, nil
}

func imageOf(t *corev1.PodTemplateSpec) string {
	for _, c := range t.Spec.Containers {
		if c.Name == containerName {
			return c.Image
		}
	}
	return ""
}

// templateImage is the image of d's app container. The cache's copy of a
// Deployment keeps no pod spec, only the images, among its annotations.
func templateImage(d *appsv1.Deployment) string {
	if len(d.Spec.Template.Spec.Containers) > 0 {
		return imageOf(&d.Spec.Template)
	}
	return d.Annotations[controller.CachedImagePrefix+containerName]
}

// templateHash is the template-hash annotation of d's pod template. The
// cache's copy of a Deployment keeps it among its own annotations, under
// controller.CachedTemplatePrefix.
func templateHash(d *appsv1.Deployment) string {
	if v, ok := d.Spec.Template.Annotations[annotationTemplateHash]; ok {
		return v
	}
	return d.Annotations[controller.CachedTemplatePrefix+annotationTemplateHash]
}

// SelectorOf is d's pod selector. The cache's copy of a Deployment has
// none when it is the one daytwo gives every WebApp's Deployment
// (DefaultSelector): that one is put back from the controlling WebApp's name.
func SelectorOf(d *appsv1.Deployment) map[string]string {
	if d.Spec.Selector != nil {
		return d.Spec.Selector.MatchLabels
	}
	if owner := metav1.GetControllerOf(d); owner != nil && owner.Kind == "WebApp" {
		return map[string]string{labelWebApp: owner.Name}
	}
	// Never an empty selector, which would select every pod.
	return map[string]string{labelWebApp: d.Name}
}

// DefaultSelector says whether d selects its pods exactly as daytwo does
// for the WebApp that controls it.
func DefaultSelector(d *appsv1.Deployment) bool {
	s := d.Spec.Selector
	if s == nil || len(s.MatchExpressions) > 0 || len(s.MatchLabels) != 1 {
		return false
	}
	owner := metav1.GetControllerOf(d)
	v, ok := s.MatchLabels[labelWebApp]
	return ok && owner != nil && owner.Kind == "WebApp" && v == owner.Name
}

func (r *Reconciler) applyService(ctx context.Context, app *v1alpha1.WebApp, sel map[string]string) error {
	return controller.ApplyIfChanged(ctx, r.Client, controller.Named[corev1.Service](app.Namespace, app.Name), service(app, sel), corev1ac.ExtractService, "Service")
}

// applyOptionalChildren applies the HPA, PDB and Ingress the spec asks for
// and deletes those it no longer asks for.
func (r *Reconciler) applyOptionalChildren(ctx context.Context, app *v1alpha1.WebApp, sel map[string]string) error {
	if h := hpa(app); h != nil {
		live := controller.Named[autoscalingv2.HorizontalPodAutoscaler](app.Namespace, app.Name)
		if err := controller.ApplyIfChanged(ctx, r.Client, live, h, autoscalingv2ac.ExtractHorizontalPodAutoscaler, "HorizontalPodAutoscaler"); err != nil {
			return err
		}
	} else if err := r.deleteOwned(ctx, app, &autoscalingv2.HorizontalPodAutoscaler{}); err != nil {
		return err
	}
	if p := pdb(app, sel); p != nil {
		live := controller.Named[policyv1.PodDisruptionBudget](app.Namespace, app.Name)
		if err := controller.ApplyIfChanged(ctx, r.Client, live, p, policyv1ac.ExtractPodDisruptionBudget, "PodDisruptionBudget"); err != nil {
			return err
		}
	} else if err := r.deleteOwned(ctx, app, &policyv1.PodDisruptionBudget{}); err != nil {
		return err
	}
	if i := ingress(app); i != nil {
		return controller.ApplyIfChanged(ctx, r.Client, controller.Named[networkingv1.Ingress](app.Namespace, app.Name), i, networkingv1ac.ExtractIngress, "Ingress")
	}
	return r.deleteOwned(ctx, app, &networkingv1.Ingress{})
}

// deleteOwned deletes app's child of obj's type, if app controls it.
func (r *Reconciler) deleteOwned(ctx context.Context, app *v1alpha1.WebApp, obj client.Object) error {
	obj.SetNamespace(app.Namespace)
	obj.SetName(app.Name)
	return controller.DeleteOwned(ctx, r.Client, app, obj, kindOf(obj))
}
