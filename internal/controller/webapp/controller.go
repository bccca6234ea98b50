package webapp

import (
	"context"
	"errors"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
)

// orphanFinalizer holds a WebApp with deletionPolicy Orphan until its
// children no longer point at it; garbage collection would delete them otherwise.
const orphanFinalizer = "daytwo.dev/orphan-children"

// conflictRetry is how often a WebApp blocked by a child it does not own
// looks again: the foreign object is not watched, so nothing else wakes it.
const conflictRetry = time.Minute

// Reconciler reconciles a WebApp.
type Reconciler struct {
	Client client.Client
	// APIReader reads without the cache: ReplicaSets and the full pod
	// template during a rollback, and pods while a rollout is stuck
	// (diagnosePods).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Namespaces are those a namespaced install watches; nil means all.
	Namespaces []string
	// Clock drives the canary's windows, the rollout diagnosis and the
	// cache's patience; nil means the real clock.
	Clock clock.PassiveClock
	// unsettled holds, per WebApp, when a reconcile first saw its
	// Deployment with pods unavailable (see diagnosePods); an entry goes
	// when the pods are back, or the WebApp is.
	unsettled sync.Map
	// canaryReady holds, per WebApp, the canary pods seen ready (a pod
	// that turns not ready after is a readiness flap), and httpTallies
	// the HTTP check's count in the current canary step.
	canaryReady, httpTallies sync.Map
	// applied holds, per Deployment (a WebApp's and its canary's), what
	// the last apply returned, until the cache holds it (see cacheBehind).
	applied sync.Map
}

// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps/status,verbs=patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps/scale,verbs=update
// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=daytwo.dev,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=configmaps;secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one WebApp towards its spec and reports what it observed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	app := &v1alpha1.WebApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, app); err != nil {
		if apierrors.IsNotFound(err) {
			r.unsettled.Delete(req.NamespacedName)
			r.applied.Delete(req.NamespacedName)
			r.forgetCanary(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !app.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.reconcileDelete(ctx, app)
	}
	if changed, err := r.syncFinalizer(ctx, app); changed || err != nil {
		return reconcile.Result{}, err
	}
	before := app.DeepCopy()
	defer func() {
		if errors.Is(err, errCacheBehind) {
			// Nothing observed is current: no status from it.
			res, err = reconcile.Result{RequeueAfter: time.Second}, nil
			return
		}
		conditions.Summarize(&app.Status.Conditions, app.Generation)
		err = controller.WriteStatus(ctx, r.Client, before, app, before.Status, app.Status, err)
	}()
	return r.reconcileNormal(ctx, app)
}

// syncFinalizer adds the orphan finalizer when deletionPolicy is Orphan and
// removes it otherwise, as a patch of its own.
func (r *Reconciler) syncFinalizer(ctx context.Context, app *v1alpha1.WebApp) (bool, error) {
	want := app.Spec.DeletionPolicy == v1alpha1.WebAppDeletionOrphan
	if want == controllerutil.ContainsFinalizer(app, orphanFinalizer) {
		return false, nil
	}
	base := app.DeepCopy()
	if want {
		controllerutil.AddFinalizer(app, orphanFinalizer)
	} else {
		controllerutil.RemoveFinalizer(app, orphanFinalizer)
	}
	return true, r.Client.Patch(ctx, app, client.MergeFrom(base))
}

// reconcileNormal applies the children and rebuilds the status from what it observed.
func (r *Reconciler) reconcileNormal(ctx context.Context, app *v1alpha1.WebApp) (_ reconcile.Result, err error) {
	obs := observation{}
	before := app.Status.ObservedGeneration
	defer func() {
		setStatus(app, obs)
		app.Status.ObservedGeneration = controller.ObservedGeneration(before, app.Generation, err)
	}()

	in, missing, err := r.podInputs(ctx, app)
	if err != nil {
		return reconcile.Result{}, err
	}
	if obs.missing = missing; missing != "" {
		return reconcile.Result{}, nil
	}
	if obs.conflict, in.selector, err = r.checkOwnership(ctx, app); err != nil || obs.conflict != "" {
		return reconcile.Result{RequeueAfter: conflictRetry}, err
	}
	obs.selector = in.selector
	if obs.rollout, err = r.applyDeployment(ctx, app, in); err != nil {
		return reconcile.Result{}, err
	}
	var again time.Duration
	if c := obs.rollout.canary; c != nil {
		again = c.requeue
	}
	if d := obs.rollout.deployment; d != nil {
		problem, next, err := r.diagnosePods(ctx, app, d, r.Clock.Now())
		if err != nil {
			return reconcile.Result{}, err
		}
		obs.problem, again = problem, controller.Soonest(again, next)
	}
	if err := r.applyService(ctx, app, in.selector); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: again}, r.applyOptionalChildren(ctx, app, in.selector)
}

// SetupWithManager declares every trigger of this controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr manager.Manager) error {
	controller.RegisterMetrics()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.WebApp{}, referenceIndex, func(o client.Object) []string {
		return indexKeys(o.(*v1alpha1.WebApp))
	}); err != nil {
		return err
	}
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.WebApp{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.Ingress{}).
		// Only metadata: the resourceVersion is what the config hash needs,
		// and the operator never holds Secret data in memory.
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.referrers(kindConfigMap))).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.referrers(kindSecret))).
		Watches(&v1alpha1.Database{}, handler.EnqueueRequestsFromMapFunc(r.referrers(kindDatabase))).
		// Only labels: a namespace's Pod Security level decides whether a
		// template may be applied (podSecurity).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.inNamespace),
			builder.WithPredicates(podSecurityLabelsChanged)).
		Named("webapp").
		Complete(r)
}
