package database

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// cleanupFinalizer holds a Database until its deletionPolicy has been
// carried out on what garbage collection does not handle: the volumes and
// the retained Secrets.
const cleanupFinalizer = "daytwo.dev/database-cleanup"

// DefaultUpgradeDeadline is how long an instance on a new image may take to
// become ready before the image is rolled back.
const DefaultUpgradeDeadline = 5 * time.Minute

// conflictRetry is how often a Database blocked by an object of a child's
// name that it does not control looks again (not every kind is watched by name).
const conflictRetry = time.Minute

// restoreRetry is how often a Database waiting for the DatabaseBackup it
// restores from looks again (DatabaseBackups are not watched).
const restoreRetry = 30 * time.Second

// Reconciler reconciles a Database.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache holds as metadata only (the rendered
	// ConfigMap, a kept Secret's keys).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// InstanceImage is the daytwo image whose binary the init container
	// copies into each PostgreSQL pod.
	InstanceImage string
	// PoolerImage is the PgBouncer image of spec.pooler's pools, unless
	// the Database names one.
	PoolerImage string
	// APIAudiences are the audiences the API server accepts tokens of: a
	// storage web identity of one of them is refused.
	APIAudiences []string
	// UpgradeDeadline bounds an image rollout per instance; zero means DefaultUpgradeDeadline.
	UpgradeDeadline time.Duration
	Clock           clock.PassiveClock
	// Instances asks instance managers for their status; nil means a
	// client with a one-second timeout.
	Instances *instanceapi.Client
	// apiTLSCache holds the instance API's client configuration per
	// Database.
	apiTLSCache apiTLSCache
	// inPlace remembers revision comparisons and asked restarts (inplace.go).
	inPlace inPlaceState
}

// InstanceRefresh is how often a running Database's instances are asked
// again, so LSNs and streaming state in the status stay current: the
// period of a Database at rest (make bench-database measures over whole
// periods).
const InstanceRefresh = 30 * time.Second

// +kubebuilder:rbac:groups=daytwo.dev,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databases/status,verbs=patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch

// Reconcile brings one Database towards its spec and reports what it observed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, err error) {
	db := &v1alpha1.Database{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.apiTLSCache.forget(req.NamespacedName)
			forgetMetrics(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	initMetrics(db)
	if db.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(db, cleanupFinalizer) {
		base := db.DeepCopy()
		controllerutil.AddFinalizer(db, cleanupFinalizer)
		return reconcile.Result{}, r.Client.Patch(ctx, db, client.MergeFrom(base))
	}
	before := db.DeepCopy()
	defer func() {
		recordInstanceMetrics(db)
		conditions.Summarize(&db.Status.Conditions, db.Generation)
		err = controller.WriteStatus(ctx, r.Client, before, db, before.Status, db.Status, err)
	}()
	if !db.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.reconcileDelete(ctx, db)
	}
	if paused(db) {
		return reconcile.Result{}, nil
	}
	return r.reconcileNormal(ctx, db, before)
}

// paused says whether the annotation daytwo.dev/reconcile pauses daytwo's
// work on db, and records it in the condition: the status keeps what it
// said when the pause began.
func paused(db *v1alpha1.Database) bool {
	if db.Annotations[v1alpha1.AnnotationReconcile] != v1alpha1.ReconcilePaused {
		meta.RemoveStatusCondition(&db.Status.Conditions, v1alpha1.ConditionReconcilePaused)
		return false
	}
	conditions.Set(&db.Status.Conditions, db.Generation, v1alpha1.ConditionReconcilePaused, metav1.ConditionTrue,
		v1alpha1.ReasonReconcilePaused, "The annotation "+v1alpha1.AnnotationReconcile+"="+v1alpha1.ReconcilePaused+
			" pauses daytwo: the instances run as they are, and nothing fails them over, rolls or repairs them until it goes")
	return true
}

// reconcileNormal applies the children, rolls instances that run an old
// revision and rebuilds the status from what it observed. written is the
// Database as the API server has it, which the status write at the end
// patches.
func (r *Reconciler) reconcileNormal(ctx context.Context, db, written *v1alpha1.Database) (_ reconcile.Result, err error) {
	p := newPlan(db)
	obs := &observation{plan: p, now: r.Clock.Now(), View: ha.View{Written: written, Started: time.Now(),
		Replication: p.replication(db), WantInstances: p.instances}}
	defer func() {
		setStatus(db, obs)
		db.Status.ObservedGeneration = controller.ObservedGeneration(written.Status.ObservedGeneration, db.Generation, err)
	}()

	if obs.found.invalid = validate(db, obs.plan); obs.found.invalid != "" {
		return r.runSteps(ctx, db, obs, r.availabilitySteps())
	}
	return r.runSteps(ctx, db, obs, r.steps())
}

// refresh is how soon the instances' status is polled again, when they
// answered this time.
func refresh(obs *observation) time.Duration {
	if len(obs.InstanceStatuses) > 0 {
		return InstanceRefresh
	}
	return 0
}

// primariesOn maps a node to the Databases whose primary runs on it.
func (r *Reconciler) primariesOn(ctx context.Context, obj client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.MatchingLabels{labelRole: "primary"}); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list the primaries on a node; its Databases are not reconciled for this change", "node", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, p := range pods.Items {
		if p.Spec.NodeName == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: p.Labels[labelDatabase]}})
		}
	}
	return out
}

// cordonChanged lets through a node that was cordoned or uncordoned.
var cordonChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	DeleteFunc: func(event.DeleteEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return ok1 && ok2 && o.Spec.Unschedulable != n.Spec.Unschedulable
	},
}

// SetupWithManager declares every trigger of this controller.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.UpgradeDeadline == 0 {
		r.UpgradeDeadline = DefaultUpgradeDeadline
	}
	if r.Instances == nil {
		r.Instances = instanceapi.NewClient(time.Second)
		r.Instances.Observe = countInstanceAPICall
	}
	registerMetrics()
	controller.RegisterMetrics()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.Database{}, certificateIndex, func(o client.Object) []string {
		if t := o.(*v1alpha1.Database).Spec.TLS; t != nil && t.ServerCertificate != nil {
			return []string{t.ServerCertificate.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("failed to index Databases by certificate Secret: %w", err)
	}
	// Pods and volumes belong to the StatefulSet, not to the Database: map them by label.
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name, ok := obj.GetLabels()[labelDatabase]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
	})
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.Database{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		// Metadata only: the operator never caches Secret data, nor every
		// ConfigMap of the cluster (the WebApp controller shares these informers).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		Owns(&corev1.Secret{}, builder.OnlyMetadata).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&coordinationv1.Lease{}, builder.WithPredicates(leaseChanged)).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Watches(&corev1.Pod{}, byLabel).
		// A user's certificate Secret (spec.tls), renewed or fixed.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.usingCertificate), builder.OnlyMetadata).
		// A cordoned node (a drain) moves its primary elsewhere first.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.primariesOn), builder.WithPredicates(cordonChanged)).
		Watches(&corev1.PersistentVolumeClaim{}, byLabel).
		// A final backup's progress moves a Snapshot deletion forward.
		// and a Physical one turns archiving on or off.
		Watches(&v1alpha1.DatabaseBackup{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			reqs := physicalBackupRequests(obj)
			if owner := metav1.GetControllerOf(obj); owner != nil && owner.Kind == "Database" {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: owner.Name}})
			}
			if name, ok := obj.GetLabels()[labelFinalBackupOf]; ok {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}})
			}
			return reqs
		})).
		Named("database").
		Complete(r)
}
