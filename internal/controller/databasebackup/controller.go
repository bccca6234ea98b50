package databasebackup

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

// Reconciler reconciles a DatabaseBackup.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups/finalizers,verbs=update

// Reconcile brings one DatabaseBackup towards its spec and reports what it observed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, err error) {
	b := &v1alpha1.DatabaseBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	before := b.DeepCopy()
	defer func() {
		err = errors.Join(err, controller.PatchStatus(ctx, r.Client, before, b, before.Status, b.Status))
	}()
	return r.reconcileNormal(ctx, b)
}

// reconcileNormal checks what the schema cannot (the cron expression and time
// zone really parse) and records it. Backup Jobs arrive with the backup
// capability; until then the status says so instead of pretending.
func (r *Reconciler) reconcileNormal(_ context.Context, b *v1alpha1.DatabaseBackup) (reconcile.Result, error) {
	b.Status.ObservedGeneration = b.Generation
	if err := validateSchedule(b); err != nil {
		conditions.Set(&b.Status.Conditions, b.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse,
			v1alpha1.ReasonInvalidSpec, err.Error())
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	conditions.Set(&b.Status.Conditions, b.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse,
		v1alpha1.ReasonNotImplemented, "The spec is valid; this daytwo build does not run backups yet")
	return reconcile.Result{}, nil
}

// validateSchedule parses spec.schedule and spec.verify.schedule with the
// parser the scheduler uses, naming the field in the error.
func validateSchedule(b *v1alpha1.DatabaseBackup) error {
	tz := ""
	if b.Spec.TimeZone != nil {
		tz = *b.Spec.TimeZone
	}
	if b.Spec.Schedule != "" {
		if _, err := schedule.Parse(b.Spec.Schedule, tz); err != nil {
			return fmt.Errorf("spec.schedule: %w", err)
		}
	}
	if v := b.Spec.Verify; v != nil && v.Schedule != "" {
		if _, err := schedule.Parse(v.Schedule, tz); err != nil {
			return fmt.Errorf("spec.verify.schedule: %w", err)
		}
	}
	return nil
}

// SetupWithManager declares every trigger of this controller.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.DatabaseBackup{}).
		Named("databasebackup").
		Complete(r)
}
