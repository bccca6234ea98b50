package databasebackup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

// Reconciler reconciles a DatabaseBackup.
type Reconciler struct {
	Client client.Client
	// APIReader reads pods of finished Jobs (their termination messages)
	// without caching every pod of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// InstanceImage is the daytwo image whose binary backup Jobs run.
	InstanceImage string
	Clock         clock.PassiveClock
	// APIAudiences are the audiences the API server accepts tokens of: a
	// web identity of one of them is refused.
	APIAudiences []string
}

// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups/status,verbs=patch
// +kubebuilder:rbac:groups=daytwo.dev,resources=databasebackups/finalizers,verbs=update
// +kubebuilder:rbac:groups=daytwo.dev,resources=databases,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one DatabaseBackup towards its spec and reports what it observed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, err error) {
	b := &v1alpha1.DatabaseBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		forget(req.NamespacedName)
		return reconcile.Result{}, nil // Jobs go with it; stored backups stay
	}
	before := b.DeepCopy()
	defer func() {
		observeConditions(b)
		conditions.Summarize(&b.Status.Conditions, b.Generation)
		b.Status.ObservedGeneration = controller.ObservedGeneration(before.Status.ObservedGeneration, b.Generation, err)
		err = controller.WriteStatus(ctx, r.Client, before, b, before.Status, b.Status, err)
	}()
	return r.reconcileNormal(ctx, b)
}

// reconcileNormal records finished runs, starts the run that is due, and
// computes when to look again.
func (r *Reconciler) reconcileNormal(ctx context.Context, b *v1alpha1.DatabaseBackup) (reconcile.Result, error) {
	now := r.Clock.Now()
	b.Status.ObservedGeneration = b.Generation
	b.Status.Series = series.ID(b)
	if err := validateSchedule(b); err != nil {
		setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, err.Error())
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if problem := series.AudienceProblem(b, r.APIAudiences); problem != "" {
		setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, problem)
		return reconcile.Result{}, reconcile.TerminalError(errors.New(problem))
	}
	if reason, problem, err := r.ensureKeys(ctx, b); err != nil || problem != "" {
		if problem != "" {
			// No watch on Secrets here: look again.
			setCondition(b, v1alpha1.ConditionReady, false, reason, problem)
			return reconcile.Result{RequeueAfter: archivingPoll}, nil
		}
		return reconcile.Result{}, err
	}
	jobs, err := r.ownedJobs(ctx, b)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.recordFinished(ctx, b, jobs); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.pruneHistory(ctx, b, jobs); err != nil {
		return reconcile.Result{}, err
	}
	inUse, err := r.setSharedLocation(ctx, b)
	if err != nil {
		return reconcile.Result{}, err
	}
	if inUse != "" {
		// Two writers of one series would prune each other's backups.
		setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonSeriesInUse, inUse)
		return reconcile.Result{}, nil
	}
	requeue := r.setStaleness(b, now)
	verifyRequeue, err := r.reconcileVerification(ctx, b, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	next, err := r.reconcileSchedule(ctx, b, jobs, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: minPositive(requeue, minPositive(verifyRequeue, next))}, nil
}

// reconcileSchedule checks the Database and suspend, then starts what is
// due. It returns the wait until it should look again.
func (r *Reconciler) reconcileSchedule(ctx context.Context, b *v1alpha1.DatabaseBackup, jobs []batchv1.Job, now time.Time) (time.Duration, error) {
	db := &v1alpha1.Database{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseRef.Name}, db); err != nil {
		if !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("failed to get Database: %w", err)
		}
		setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonDatabaseNotFound,
			fmt.Sprintf("Database %s does not exist", b.Spec.DatabaseRef.Name))
		return time.Minute, nil
	}
	liftLastPoint(b, db)
	if b.Spec.Suspend {
		b.Status.NextScheduleTime = nil
		setCondition(b, v1alpha1.ConditionReady, true, v1alpha1.ReasonSuspended, "Scheduling is suspended")
		return 0, nil
	}
	return r.schedule(ctx, b, db, jobs, now)
}

// schedule starts the run that is due, if any, and returns the wait until
// the next one.
func (r *Reconciler) schedule(ctx context.Context, b *v1alpha1.DatabaseBackup, db *v1alpha1.Database, jobs []batchv1.Job, now time.Time) (time.Duration, error) {
	d := r.decide(b, now)
	if d.Next.IsZero() {
		b.Status.NextScheduleTime = nil
	} else {
		b.Status.NextScheduleTime = &metav1.Time{Time: d.Next}
	}
	msg := "Runs once"
	if b.Spec.Schedule != "" {
		msg = "Runs on schedule " + b.Spec.Schedule + " (see status.nextScheduleTime)"
	}
	setCondition(b, v1alpha1.ConditionReady, true, v1alpha1.ReasonScheduled, msg)
	if !d.Skipped.IsZero() {
		b.Status.LastScheduleTime = &metav1.Time{Time: d.Skipped}
		controller.Event(ctx, r.Recorder, b, nil, corev1.EventTypeWarning, "MissedRun", "Schedule",
			"Skipped the run of %s (%d missed since the last run): missedRunPolicy and startingDeadlineSeconds allow no catch-up",
			d.Skipped.UTC().Format(time.RFC3339), d.Missed)
	}
	if !d.Due.IsZero() && dbHibernated(db) {
		// No instance runs. A scheduled run is skipped, not failed; a
		// one-shot or requested run (a final or pre-upgrade backup among
		// them) waits for the Database to wake.
		if _, requested := requestedRun(b, now); b.Spec.Schedule != "" && !requested {
			b.Status.LastScheduleTime = &metav1.Time{Time: d.Due}
			controller.Event(ctx, r.Recorder, b, nil, corev1.EventTypeNormal, "Skipped", "Schedule",
				"Skipped the run of %s: Database %s hibernates", d.Due.UTC().Format(time.RFC3339), db.Name)
			return max(d.Next.Sub(now), 0), nil
		}
		setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonDatabaseHibernated,
			"The run of "+d.Due.UTC().Format(time.RFC3339)+" waits for Database "+db.Name+" to wake from hibernation")
		return hibernationPoll, nil
	}
	if !d.Due.IsZero() && b.Spec.Method == v1alpha1.BackupMethodPhysical {
		list := &v1alpha1.DatabaseBackupList{}
		if err := r.Client.List(ctx, list, client.InNamespace(b.Namespace)); err != nil {
			return 0, fmt.Errorf("failed to list DatabaseBackups: %w", err)
		}
		if first := series.PhysicalOf(list.Items, db.Name); len(first) > 0 && first[0].UID != b.UID {
			setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonWaitingForArchiving,
				fmt.Sprintf("DatabaseBackup %s archives the WAL of Database %s; this one takes no base backups (they would have no WAL) until it goes",
					first[0].Name, db.Name))
			return archivingPoll, nil
		}
	}
	if !d.Due.IsZero() && b.Spec.Method == v1alpha1.BackupMethodPhysical && !meta.IsStatusConditionTrue(db.Status.Conditions, v1alpha1.ConditionContinuousArchiving) {
		// A base backup is useless without the WAL after it: the run
		// waits until the Database archives to this backup's storage.
		why := "the Database does not report ContinuousArchiving yet"
		if c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionContinuousArchiving); c != nil {
			why = c.Message
		}
		setCondition(b, v1alpha1.ConditionReady, false, v1alpha1.ReasonWaitingForArchiving,
			"The run of "+d.Due.UTC().Format(time.RFC3339)+" waits for WAL archiving: "+why)
		return archivingPoll, nil
	}
	if !d.Due.IsZero() {
		if err := r.startRun(ctx, b, db, jobs, d); err != nil {
			return 0, err
		}
	}
	if d.Next.IsZero() {
		return 0, nil
	}
	return d.Next.Sub(now), nil
}

// archivingPoll is how often a Physical run waiting for archiving looks
// again, and hibernationPoll a run waiting for its Database to wake.
const (
	archivingPoll   = 10 * time.Second
	hibernationPoll = 30 * time.Second
)

// decide applies the schedule (or the one-shot rule) at now; a requested
// run that has not started yet is due first.
func (r *Reconciler) decide(b *v1alpha1.DatabaseBackup, now time.Time) schedule.Decision {
	d := r.decideSchedule(b, now)
	if t, ok := requestedRun(b, now); ok {
		d.Due, d.Skipped, d.Missed = t, time.Time{}, 1
	}
	return d
}

// requestedRun is the run asked for with AnnotationBackupRequested, unless
// it lies in the future or a run at or after it has started already.
func requestedRun(b *v1alpha1.DatabaseBackup, now time.Time) (time.Time, bool) {
	v, ok := b.Annotations[v1alpha1.AnnotationBackupRequested]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.After(now) {
		return time.Time{}, false
	}
	if last := b.Status.LastScheduleTime; last != nil && !last.Time.Before(t) {
		return time.Time{}, false
	}
	return t.UTC(), true
}

func (r *Reconciler) decideSchedule(b *v1alpha1.DatabaseBackup, now time.Time) schedule.Decision {
	if b.Spec.Schedule == "" {
		if b.Status.LastScheduleTime == nil {
			return schedule.Decision{Due: b.CreationTimestamp.Time, Missed: 1}
		}
		return schedule.Decision{}
	}
	s, _ := schedule.Parse(b.Spec.Schedule, ptrDeref(b.Spec.TimeZone)) // validated above
	last := b.CreationTimestamp.Time
	if b.Status.LastScheduleTime != nil {
		last = b.Status.LastScheduleTime.Time
	}
	policy := schedule.RunOnce
	if b.Spec.MissedRunPolicy == v1alpha1.MissedRunSkip {
		policy = schedule.Skip
	}
	deadline := time.Duration(0)
	if b.Spec.StartingDeadlineSeconds != nil {
		deadline = time.Duration(*b.Spec.StartingDeadlineSeconds) * time.Second
	}
	d := schedule.Decide(s, last, now, policy, deadline)
	if b.Spec.Method == v1alpha1.BackupMethodPhysical && b.Status.LastScheduleTime == nil && d.Due.IsZero() {
		// Archived WAL is worth nothing before a first base backup: a
		// Physical schedule's first run is at once, the rest on schedule.
		d.Due, d.Missed = b.CreationTimestamp.Time, 1
	}
	return d
}

// startRun creates the Job of the due time, honouring concurrencyPolicy.
func (r *Reconciler) startRun(ctx context.Context, b *v1alpha1.DatabaseBackup, db *v1alpha1.Database, jobs []batchv1.Job, d schedule.Decision) error {
	active := activeJobs(jobs)
	if len(active) > 0 {
		switch b.Spec.ConcurrencyPolicy {
		case v1alpha1.ConcurrencyAllow:
		case v1alpha1.ConcurrencyReplace:
			for i := range active {
				if err := r.Client.Delete(ctx, active[i], client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("failed to replace Job %s: %w", active[i].Name, err)
				}
			}
		default:
			b.Status.LastScheduleTime = &metav1.Time{Time: d.Due}
			controller.Event(ctx, r.Recorder, b, active[0], corev1.EventTypeWarning, "Skipped", "Schedule",
				"Skipped the run of %s: Job %s is still running (concurrencyPolicy Forbid)", d.Due.UTC().Format(time.RFC3339), active[0].Name)
			return nil
		}
	}
	job := backupJob(b, r.jobInputs(db), d.Due)
	if err := controllerutil.SetControllerReference(b, job, r.Client.Scheme()); err != nil {
		return err
	}
	err := r.Client.Create(ctx, job)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create Job %s: %w", job.Name, err)
	}
	b.Status.LastScheduleTime = &metav1.Time{Time: d.Due}
	if err == nil {
		controller.Event(ctx, r.Recorder, b, job, corev1.EventTypeNormal, "Started", "Backup", "Started Job %s for the run of %s",
			job.Name, d.Due.UTC().Format(time.RFC3339))
	}
	return nil
}

func (r *Reconciler) jobInputs(db *v1alpha1.Database) jobInputs {
	image := db.Status.CurrentImage
	if image == "" {
		image = db.Spec.Image
	}
	if image == "" {
		image = postgres.DefaultImage(db.Spec.Version)
	}
	in := jobInputs{image: image, instanceImage: r.InstanceImage, credentials: db.CredentialsSecretName(),
		replication: db.ReplicationSecretName(), primary: db.PrimaryHost(), shape: shapeOf(db)}
	if db.Status.ReadyInstances > 1 {
		// A ready replica streams: base backups spare the primary.
		in.replicas = db.ReplicaHost()
	}
	return in
}

// setStaleness raises BackupStale once the newest success is older than
// maxAge and returns when it will become stale.
func (r *Reconciler) setStaleness(b *v1alpha1.DatabaseBackup, now time.Time) time.Duration {
	if b.Spec.MaxAge == nil {
		meta.RemoveStatusCondition(&b.Status.Conditions, v1alpha1.ConditionBackupStale)
		return 0
	}
	ref, what := b.CreationTimestamp.Time, "No backup has succeeded since the DatabaseBackup was created"
	if t := b.Status.LastBackupTime; t != nil {
		ref, what = t.Time, "The newest backup is from "+t.UTC().Format(time.RFC3339)
	}
	staleAt := ref.Add(b.Spec.MaxAge.Duration)
	if !now.Before(staleAt) {
		setCondition(b, v1alpha1.ConditionBackupStale, true, v1alpha1.ReasonNoRecentBackup,
			fmt.Sprintf("%s, older than maxAge %s", what, b.Spec.MaxAge.Duration))
		return 0
	}
	setCondition(b, v1alpha1.ConditionBackupStale, false, v1alpha1.ReasonRecentBackup,
		fmt.Sprintf("%s, within maxAge %s", what, b.Spec.MaxAge.Duration))
	return staleAt.Sub(now)
}

// locationIndex indexes DatabaseBackups by Location.
const locationIndex = "daytwo.dev/location"

// setSharedLocation warns when other DatabaseBackups store where b does,
// and says why b must not run when an older one writes its series there
// too (spec.series naming it).
func (r *Reconciler) setSharedLocation(ctx context.Context, b *v1alpha1.DatabaseBackup) (string, error) {
	list := &v1alpha1.DatabaseBackupList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{locationIndex: series.Location(b)}); err != nil {
		return "", fmt.Errorf("failed to list DatabaseBackups at %s: %w", series.Location(b), err)
	}
	var others []string
	inUse := ""
	for _, o := range list.Items {
		if o.UID == b.UID {
			continue
		}
		others = append(others, o.Namespace+"/"+o.Name)
		if series.ID(&o) == series.ID(b) && olderThan(&o, b) {
			inUse = fmt.Sprintf("DatabaseBackup %s/%s, older, writes series %s at %s: this one takes no backups while it does",
				o.Namespace, o.Name, series.ID(b), series.Location(b))
		}
	}
	if len(others) == 0 {
		setCondition(b, v1alpha1.ConditionSharedLocation, false, v1alpha1.ReasonLocationExclusive, "No other DatabaseBackup stores at "+series.Location(b))
		return "", nil
	}
	slices.Sort(others)
	setCondition(b, v1alpha1.ConditionSharedLocation, true, v1alpha1.ReasonLocationShared,
		fmt.Sprintf("DatabaseBackup %s also stores at %s; each series lists, prunes and restores only its own backups",
			strings.Join(others, ", "), series.Location(b)))
	return inUse, nil
}

// olderThan: a was created before b (by name when in the same second).
func olderThan(a, b *v1alpha1.DatabaseBackup) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// SetupWithManager declares every trigger of this controller.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	registerMetrics()
	// A Database appearing (or changing image) matters to the DatabaseBackups naming it.
	byDatabase := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := &v1alpha1.DatabaseBackupList{}
		if err := mgr.GetClient().List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
			logf.FromContext(ctx).Error(err, "Failed to list the DatabaseBackups of a Database", "database", klog.KObj(obj))
			return nil
		}
		var out []reconcile.Request
		for _, b := range list.Items {
			if b.Spec.DatabaseRef.Name == obj.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
			}
		}
		return out
	})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.DatabaseBackup{}, locationIndex,
		func(obj client.Object) []string { return []string{series.Location(obj.(*v1alpha1.DatabaseBackup))} }); err != nil {
		return err
	}
	// A DatabaseBackup appearing at, or leaving, a location matters to the others there.
	sameLocation := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := &v1alpha1.DatabaseBackupList{}
		if err := mgr.GetClient().List(ctx, list, client.MatchingFields{locationIndex: series.Location(obj.(*v1alpha1.DatabaseBackup))}); err != nil {
			logf.FromContext(ctx).Error(err, "Failed to list the DatabaseBackups sharing a location", "databaseBackup", klog.KObj(obj))
			return nil
		}
		var out []reconcile.Request
		for _, o := range list.Items {
			if o.UID != obj.GetUID() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&o)})
			}
		}
		return out
	})
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.DatabaseBackup{}).
		Watches(&v1alpha1.DatabaseBackup{}, sameLocation).
		Owns(&batchv1.Job{}).
		Owns(&v1alpha1.Database{}).
		Watches(&v1alpha1.Database{}, byDatabase).
		Named("databasebackup").
		Complete(r)
}

func setCondition(b *v1alpha1.DatabaseBackup, typ string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	conditions.Set(&b.Status.Conditions, b.Generation, typ, s, reason, msg)
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

func ptrDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// dbHibernated says whether no instance of db runs for its hibernation,
// as its status says (not its spec: a hibernation that waits leaves the
// instances running, and backing them up).
func dbHibernated(db *v1alpha1.Database) bool {
	c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Reason == v1alpha1.ReasonHibernated
}
