package database

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

// Reconciler reconciles a Database.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=daytwo.dev,resources=databases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databases/finalizers,verbs=update

// Reconcile brings one Database towards its spec and reports what it observed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, err error) {
	db := &v1alpha1.Database{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !db.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	before := db.DeepCopy()
	defer func() {
		err = errors.Join(err, controller.PatchStatus(ctx, r.Client, before, db, before.Status, db.Status))
	}()
	return r.reconcileNormal(ctx, db)
}

// reconcileNormal records that the spec was accepted. Children arrive with the
// Database capability; until then the status says so instead of pretending.
func (r *Reconciler) reconcileNormal(_ context.Context, db *v1alpha1.Database) (reconcile.Result, error) {
	conditions.Set(&db.Status.Conditions, db.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse,
		v1alpha1.ReasonNotImplemented, "The spec is valid; this daytwo build does not run PostgreSQL yet")
	db.Status.ObservedGeneration = db.Generation
	return reconcile.Result{}, nil
}

// SetupWithManager declares every trigger of this controller.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.Database{}).
		Named("database").
		Complete(r)
}
