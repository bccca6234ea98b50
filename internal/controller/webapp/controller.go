package webapp

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
)

// Reconciler reconciles a WebApp.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=webapps/finalizers,verbs=update

// Reconcile brings one WebApp towards its spec and reports what it observed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, err error) {
	app := &v1alpha1.WebApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, app); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !app.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	before := app.DeepCopy()
	defer func() {
		err = errors.Join(err, controller.PatchStatus(ctx, r.Client, before, app, before.Status, app.Status))
	}()
	return r.reconcileNormal(ctx, app)
}

// reconcileNormal records that the spec was accepted. Children arrive with the
// WebApp capability; until then the status says so instead of pretending.
func (r *Reconciler) reconcileNormal(_ context.Context, app *v1alpha1.WebApp) (reconcile.Result, error) {
	conditions.Set(&app.Status.Conditions, app.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse,
		v1alpha1.ReasonNotImplemented, "The spec is valid; this daytwo build does not create WebApp children yet")
	app.Status.ObservedGeneration = app.Generation
	return reconcile.Result{}, nil
}

// SetupWithManager declares every trigger of this controller.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.WebApp{}).
		Named("webapp").
		Complete(r)
}
