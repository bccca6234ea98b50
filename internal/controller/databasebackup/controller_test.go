package databasebackup_test

// envtest with the operator running on a fake clock. No Job controller or
// kubelet runs here: a test finishes a Job by writing what they would (the
// pod's termination message, the Job's conditions).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

var (
	env *testenv.Env
	// clock is the one clock of the operator every test here runs against,
	// and tests move it: they must not call t.Parallel. holdClock makes a
	// test that overlaps another one fail instead of reading its times.
	clock = clocktesting.NewFakeClock(time.Now())
	ctx   = context.Background()
)

// clockHolder is the test that uses the clock now.
var clockHolder struct {
	sync.Mutex
	t *testing.T
}

// holdClock claims the clock for t until t ends, failing t if another test
// holds it. A claim starts the clock at the real time again, so where an
// earlier test left it does not leak into t's schedules.
func holdClock(t *testing.T) {
	t.Helper()
	clockHolder.Lock()
	defer clockHolder.Unlock()
	switch clockHolder.t {
	case t:
	case nil:
		clockHolder.t = t
		clock.SetTime(time.Now())
		t.Cleanup(func() {
			clockHolder.Lock()
			defer clockHolder.Unlock()
			clockHolder.t = nil
		})
	default:
		t.Fatalf("%s uses the fake clock at the same time: tests that share it must not run in parallel", clockHolder.t.Name())
	}
}

func setClock(t *testing.T, to time.Time) {
	t.Helper()
	holdClock(t)
	clock.SetTime(to)
}

func stepClock(t *testing.T, d time.Duration) {
	t.Helper()
	holdClock(t)
	clock.Step(d)
}

func TestMain(m *testing.M) { testenv.Main(m, &env, operator.Options{Clock: clock}) }

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}

// setup creates a Database and a DatabaseBackup of it in a new namespace.
func setup(t *testing.T, mutate func(*v1alpha1.DatabaseBackup)) (string, *v1alpha1.DatabaseBackup) {
	t.Helper()
	holdClock(t)
	ns := env.Namespace(t)
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}, Spec: v1alpha1.DatabaseSpec{Version: "15"}}
	if err := env.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "backups", Insecure: true,
				CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}},
		},
	}
	if mutate != nil {
		mutate(b)
	}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	return ns, b
}

func jobs(t *testing.T, ns string) []batchv1.Job {
	t.Helper()
	list := &batchv1.JobList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func waitJobs(t *testing.T, ns string, n int) []batchv1.Job {
	t.Helper()
	var got []batchv1.Job
	eventually(t, fmt.Sprintf("%d Jobs", n), func() (bool, error) { got = jobs(t, ns); return len(got) == n, nil })
	return got
}

func get(t *testing.T, b *v1alpha1.DatabaseBackup) *v1alpha1.DatabaseBackup {
	t.Helper()
	out := &v1alpha1.DatabaseBackup{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func waitCondition(t *testing.T, b *v1alpha1.DatabaseBackup, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.DatabaseBackup {
	t.Helper()
	var got *v1alpha1.DatabaseBackup
	eventually(t, fmt.Sprintf("%s=%s %s", typ, status, reason), func() (bool, error) {
		got = get(t, b)
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
	return got
}

// poke makes the operator reconcile now (the fake clock does not fire requeues).
func poke(t *testing.T, b *v1alpha1.DatabaseBackup) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, b)
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations["test/poke"] = clock.Now().Format(time.RFC3339Nano)
		return env.Client.Update(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// reconciled makes the operator reconcile b and returns once that reconcile
// has finished. A poke leaves no trace once handled; a spec change does: the
// operator writes status.observedGeneration after everything else it does.
// activeDeadlineSeconds only bounds Jobs created later, so no run depends on it.
func reconciled(t *testing.T, b *v1alpha1.DatabaseBackup) {
	t.Helper()
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, b)
		cur.Spec.ActiveDeadlineSeconds = ptr.To(ptr.Deref(cur.Spec.ActiveDeadlineSeconds, 3600) + 1)
		err := env.Client.Update(ctx, cur)
		gen = cur.Generation
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("observedGeneration %d", gen), func() (bool, error) {
		return get(t, b).Status.ObservedGeneration >= gen, nil
	})
}

// finish plays the Job controller and the kubelet: a pod that reported res,
// then the Job's terminal condition.
func finish(t *testing.T, job *batchv1.Job, ok bool, res backup.Result) {
	t.Helper()
	msg, _ := json.Marshal(res)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-pod", Labels: map[string]string{batchv1.JobNameLabel: job.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	phase, code := corev1.PodSucceeded, int32(0)
	if !ok {
		phase, code = corev1.PodFailed, 1
	}
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "backup", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: string(msg)}}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testenv.FinishJob(job, metav1.NewTime(clock.Now()), ok)
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatalf("finish Job: %v", err)
	}
}

func TestOneShotRunsOnceWithTheRightJob(t *testing.T) {
	ns, b := setup(t, nil)
	job := waitJobs(t, ns, 1)[0]
	b = get(t, b)
	if want := fmt.Sprintf("nightly-%d", b.CreationTimestamp.Unix()); job.Name != want {
		t.Errorf("Job name %s, want %s", job.Name, want)
	}
	if owner := metav1.GetControllerOf(&job); owner == nil || owner.UID != b.UID {
		t.Errorf("Job not owned by the DatabaseBackup")
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"backup run", "--prefix=" + ns + "/nightly/", "--s3-endpoint=minio:9000", "--s3-bucket=backups",
		"--s3-insecure", "--keep-last=7", "--database-name=orders", "--id=" + backup.NewID(b.CreationTimestamp.Time), "--roles-user=streaming_replica"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if c.Image != postgres.DefaultImage("15") || pod.InitContainers[0].Image != operator.DefaultInstanceImage() {
		t.Errorf("images: %s, init %s", c.Image, pod.InitContainers[0].Image)
	}
	envFrom := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			envFrom[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if envFrom["PGPASSWORD"] != "orders-credentials/password" || envFrom["AWS_SECRET_ACCESS_KEY"] != "s3/AWS_SECRET_ACCESS_KEY" ||
		envFrom[backup.RolesPasswordEnv] != "orders-replication/password" || envFrom[backup.SeriesKeyEnv] != "nightly-series-key/key" {
		t.Errorf("secret env: %v", envFrom)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || *job.Spec.BackoffLimit != 2 || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		*pod.SecurityContext.RunAsUser != 999 || *pod.AutomountServiceAccountToken {
		t.Errorf("Job spec not as expected: %+v", job.Spec)
	}
	// The series key: random, kept when the DatabaseBackup goes.
	key := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nightly-series-key"}, key); err != nil {
		t.Fatal(err)
	}
	if len(key.Data["key"]) != 64 || len(key.OwnerReferences) != 0 {
		t.Errorf("series key Secret: %d bytes, owners %v", len(key.Data["key"]), key.OwnerReferences)
	}
	var got *v1alpha1.DatabaseBackup
	eventually(t, "the Job listed as active", func() (bool, error) {
		got = get(t, b)
		return len(got.Status.ActiveJobs) == 1, nil
	})
	if got.Status.NextScheduleTime != nil || got.Status.LastScheduleTime == nil {
		t.Errorf("status after start: %+v", got.Status)
	}

	res := backup.Result{ID: backup.NewID(b.CreationTimestamp.Time), Bytes: 4096, SHA256: strings.Repeat("ab", 32), PGVersion: "15.14",
		DurationSeconds: 1.5, End: clock.Now().UTC().Truncate(time.Second), Pruned: 2,
		Retained:       []backup.Summary{{ID: "b", End: clock.Now().UTC().Truncate(time.Second), Bytes: 4096, SHA256: strings.Repeat("ab", 32)}, {ID: "a", End: clock.Now().UTC().Add(-time.Hour).Truncate(time.Second), Bytes: 10}},
		Recoverability: &backup.Window{First: clock.Now().UTC().Add(-time.Hour).Truncate(time.Second), Last: clock.Now().UTC().Truncate(time.Second)}}
	finish(t, &job, true, res)
	got = waitCondition(t, b, v1alpha1.ConditionLastRunFailed, metav1.ConditionFalse, v1alpha1.ReasonBackupSucceeded)
	if len(got.Status.Backups) != 2 || got.Status.Backups[0].ID != "b" || got.Status.PrunedTotal != 2 || got.Status.LastBackupTime == nil ||
		len(got.Status.ActiveJobs) != 0 {
		t.Errorf("status after success: %+v", got.Status)
	}
	if r := got.Status.Recoverability; r == nil || !r.FirstPoint.Time.Equal(res.Recoverability.First) || !r.LastPoint.Time.Equal(res.Recoverability.Last) {
		t.Errorf("recoverability %+v, want %+v", r, res.Recoverability)
	}
	if v := metric(t, "daytwo_backup_bytes", ns); v != 4096 {
		t.Errorf("daytwo_backup_bytes = %v, want 4096", v)
	}
	if v := metric(t, "daytwo_backup_last_success_timestamp_seconds", ns); v != float64(res.End.Unix()) {
		t.Errorf("daytwo_backup_last_success_timestamp_seconds = %v, want %d", v, res.End.Unix())
	}
	// Once means once: nothing new however often, or however much later, it reconciles.
	stepClock(t, 24*time.Hour)
	poke(t, b)
	reconciled(t, b)
	if n := len(jobs(t, ns)); n != 1 {
		t.Fatalf("%d Jobs after the one-shot finished", n)
	}
	// The key goes after a backup was taken: a new one could not verify
	// it, so daytwo asks for it back instead of making one.
	if err := env.Client.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	reconciled(t, b)
	waitNotReady(t, b, v1alpha1.ReasonSeriesKeyUnusable, "is gone")
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(key), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a new series key was made after backups were taken: %v", err)
	}
}

func TestFailureIsReportedAndClearedBySuccess(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) { b.Spec.Schedule = "*/10 * * * *" })
	setClock(t, get(t, b).CreationTimestamp.Add(10*time.Minute+5*time.Second))
	poke(t, b)
	job := waitJobs(t, ns, 1)[0]
	finish(t, &job, false, backup.Result{Error: "pg_dump failed: connection refused"})
	got := waitCondition(t, b, v1alpha1.ConditionLastRunFailed, metav1.ConditionTrue, v1alpha1.ReasonBackupFailed)
	if msg := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionLastRunFailed).Message; !strings.Contains(msg, "connection refused") {
		t.Errorf("message = %q", msg)
	}
	if v := metric(t, "daytwo_backup_failures_total", ns); v != 1 {
		t.Errorf("daytwo_backup_failures_total = %v, want 1", v)
	}
	if v, ok := conditionMetric(t, ns, v1alpha1.ConditionLastRunFailed); v != 1 || !ok {
		t.Errorf("daytwo_backup_condition{condition=LastRunFailed} = %v (present %v), want 1", v, ok)
	}
	stepClock(t, 10*time.Minute)
	poke(t, b)
	jobsNow := waitJobs(t, ns, 2)
	next := jobsNow[0]
	if next.Name == job.Name {
		next = jobsNow[1]
	}
	finish(t, &next, true, backup.Result{ID: "x", Bytes: 1, End: clock.Now()})
	waitCondition(t, b, v1alpha1.ConditionLastRunFailed, metav1.ConditionFalse, v1alpha1.ReasonBackupSucceeded)
	if v, ok := conditionMetric(t, ns, v1alpha1.ConditionLastRunFailed); v != 0 || !ok {
		t.Errorf("daytwo_backup_condition{condition=LastRunFailed} = %v (present %v) after a success, want 0", v, ok)
	}
	if _, ok := conditionMetric(t, ns, v1alpha1.ConditionVerified); ok {
		t.Error("a backup never verified exports a Verified condition")
	}
}

// conditionMetric is daytwo_backup_condition of the backup in ns for cond.
func conditionMetric(t *testing.T, ns, cond string) (float64, bool) {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "daytwo_backup_condition" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["condition"] == cond {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestTenMissedPeriodsMakeOneRun(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) { b.Spec.Schedule = "*/10 * * * *" })
	created := get(t, b).CreationTimestamp.Time
	setClock(t, created.Add(100*time.Minute+30*time.Second))
	poke(t, b)
	waitJobs(t, ns, 1)
	for range 3 {
		poke(t, b)
	}
	reconciled(t, b)
	got := jobs(t, ns)
	if len(got) != 1 {
		t.Fatalf("%d Jobs after 10 missed periods, want exactly 1", len(got))
	}
	s := get(t, b).Status
	if s.NextScheduleTime == nil || !s.NextScheduleTime.After(clock.Now()) || s.LastScheduleTime == nil || s.LastScheduleTime.After(clock.Now()) {
		t.Errorf("schedule times: last %v next %v now %v", s.LastScheduleTime, s.NextScheduleTime, clock.Now())
	}
}

func TestSuspendAndStaleness(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) {
		b.Spec.Schedule = "@hourly"
		b.Spec.Suspend = true
		b.Spec.MaxAge = &metav1.Duration{Duration: time.Hour}
	})
	got := waitCondition(t, b, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSuspended)
	setClock(t, got.CreationTimestamp.Add(2*time.Hour+time.Minute))
	poke(t, b)
	waitCondition(t, b, v1alpha1.ConditionBackupStale, metav1.ConditionTrue, v1alpha1.ReasonNoRecentBackup)
	if n := len(jobs(t, ns)); n != 0 {
		t.Fatalf("a suspended DatabaseBackup started %d Jobs", n)
	}
	if get(t, b).Status.NextScheduleTime != nil {
		t.Errorf("nextScheduleTime set while suspended")
	}
}

func TestMissingDatabaseIsACondition(t *testing.T) {
	ns := env.Namespace(t)
	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "nope"},
			Storage: v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}, BackoffLimit: ptr.To[int32](1)}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDatabaseNotFound)
	if n := len(jobs(t, ns)); n != 0 {
		t.Fatalf("%d Jobs for a missing Database", n)
	}
}

// metric reads a daytwo backup metric of namespace ns from the operator's registry.
func metric(t *testing.T, name, ns string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == ns {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{namespace=%q} not found", name, ns)
	return 0
}

// A finished Job is recorded once: replayed through more reconciles, a
// second operator with its own cache, and an operator started afresh, it
// makes one Event and one metric increment.
func TestFinishedJobIsRecordedOnce(t *testing.T) {
	ns, b := setup(t, nil)
	job := waitJobs(t, ns, 1)[0]
	second, err := env.StartOperator(operator.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	finish(t, &job, false, backup.Result{Error: "pg_dump failed: connection refused"})
	waitCondition(t, b, v1alpha1.ConditionLastRunFailed, metav1.ConditionTrue, v1alpha1.ReasonBackupFailed)
	reconcileAgain := func() {
		t.Helper()
		before := reconciles(t)
		poke(t, b)
		eventually(t, "a reconcile after the poke", func() (bool, error) { return reconciles(t) > before, nil })
	}
	reconcileAgain()
	reconcileAgain()
	if err := second(); err != nil {
		t.Fatal(err)
	}
	third, err := env.StartOperator(operator.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = third() }()
	reconcileAgain()

	if v := metric(t, "daytwo_backup_failures_total", ns); v != 1 {
		t.Errorf("daytwo_backup_failures_total = %v, want 1", v)
	}
	var events int32
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Reason == v1alpha1.ReasonBackupFailed && e.Regarding.Name == b.Name {
			events++
			if e.Series != nil {
				events += e.Series.Count - 1
			}
		}
	}
	if events != 1 {
		t.Errorf("%d BackupFailed events, want 1", events)
	}
	if got := get(t, b); got.Status.LastFailureTime == nil {
		t.Errorf("status lost the failure: %+v", got.Status)
	}
	var recorded batchv1.Job
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&job), &recorded); err != nil || recorded.Annotations["daytwo.dev/recorded"] != "failed" {
		t.Errorf("the Job is not marked recorded: %v %v", recorded.Annotations, err)
	}
}

// reconciles is how many times the databasebackup controllers reconciled.
func reconciles(t *testing.T) float64 {
	t.Helper()
	return testenv.SumMetric(t, "controller_runtime_reconcile_total", "controller", "databasebackup")
}

// A run claimed by an operator whose status write was then lost (a
// conflict, a crash) is not lost with it: the next reconcile shows its
// backup in the status, without counting it a second time. A Snapshot
// deletion waiting for its final backup depends on that.
func TestClaimedRunWithALostStatusWriteIsShown(t *testing.T) {
	ns, b := setup(t, nil)
	job := waitJobs(t, ns, 1)[0]
	env.Update(t, &job, func() {
		if job.Annotations == nil {
			job.Annotations = map[string]string{}
		}
		job.Annotations["daytwo.dev/recorded"] = "succeeded"
	})
	end := clock.Now()
	finish(t, &job, true, backup.Result{ID: "20261123T030000Z", Bytes: 42, End: end,
		Retained: []backup.Summary{{ID: "20261123T030000Z", End: end, Bytes: 42, SHA256: "abc"}}})
	eventually(t, "the claimed run's backup in the status", func() (bool, error) {
		st := get(t, b).Status
		return st.LastBackupTime != nil && len(st.Backups) == 1 && st.Backups[0].ID == "20261123T030000Z", nil
	})
	got := get(t, b)
	if got.Status.SuccessesSinceVerification != 0 {
		t.Errorf("successesSinceVerification = %d: the run was counted again", got.Status.SuccessesSinceVerification)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionLastRunFailed); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("LastRunFailed = %+v", c)
	}
}

// A Physical schedule's first run is due at once (archived WAL is worth
// nothing before a base backup), and it waits, and says why, until the
// Database archives WAL: a base backup without the WAL after it restores
// nothing.
func TestPhysicalRunWaitsForArchiving(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) {
		b.Spec.Method, b.Spec.Schedule = v1alpha1.BackupMethodPhysical, "@daily"
	})
	got := waitCondition(t, b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForArchiving)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c.Message, "waits for WAL archiving") {
		t.Errorf("Ready = %s", c.Message)
	}
	if n := len(jobs(t, ns)); n != 0 {
		t.Fatalf("%d Jobs started before the Database archives", n)
	}
}

// A second Physical DatabaseBackup of a Database takes no base backups:
// the WAL goes to the first one's storage only, so its base backups would
// restore nothing.
func TestSecondPhysicalBackupTakesNoBaseBackups(t *testing.T) {
	ns, first := setup(t, func(b *v1alpha1.DatabaseBackup) { b.Spec.Method = v1alpha1.BackupMethodPhysical })
	waitCondition(t, first, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForArchiving)
	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp
	second := first.DeepCopy()
	second.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "second"}
	if err := env.Client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second one saying which archives", func() (bool, error) {
		c := meta.FindStatusCondition(get(t, second).Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && strings.Contains(c.Message, "DatabaseBackup nightly archives the WAL of Database orders"), nil
	})
	if n := len(jobs(t, ns)); n != 0 {
		t.Fatalf("%d Jobs started", n)
	}
}

// A DatabaseBackup re-created after its cluster was lost names the series
// the lost one wrote (its status.series, by default the lost one's UID):
// its runs, and a restore from it, use that series, so the backups left in
// the bucket are found from the bucket alone. The series cannot change
// afterwards. (Before, the series was always the object's own UID.)
func TestNamedSeriesFindsABucketsBackups(t *testing.T) {
	const lost = "4b1f9c2e-8d5a-4c33-9e1b-0a7d6f2c5e81"
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) { b.Spec.Series, b.Spec.Storage.S3.Prefix = lost, "orders/" })
	job := waitJobs(t, ns, 1)[0]
	if args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--series-uid="+lost) {
		t.Errorf("args %q do not name the series %s", args, lost)
	}
	eventually(t, "status.series", func() (bool, error) { return get(t, b).Status.Series == lost, nil })
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b = get(t, b)
		b.Spec.Series = "another"
		return env.Client.Update(ctx, b)
	})
	if err == nil || !strings.Contains(err.Error(), "series cannot change") {
		t.Errorf("a change of series was not refused: %v", err)
	}
	// A second writer of the series, at the same location, takes no
	// backups: the two would prune each other's.
	twin := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "twin"}, Spec: *b.Spec.DeepCopy()}
	twin.Spec.Series = lost
	if err := env.Client.Create(ctx, twin); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the twin refused", func() (bool, error) {
		c := meta.FindStatusCondition(get(t, twin).Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonSeriesInUse, nil
	})
	if n := len(jobs(t, ns)); n != 1 {
		t.Errorf("%d backup Jobs, want only the first writer's", n)
	}
	_, own := setup(t, nil)
	eventually(t, "the default series", func() (bool, error) {
		got := get(t, own)
		return got.Status.Series == string(got.UID), nil
	})
}

// A private CA of the S3 endpoint reaches the backup Job as a file its
// --s3-ca-file names, from the Secret key caSecretRef names.
func TestPrivateS3CAReachesTheJob(t *testing.T) {
	ns, _ := setup(t, func(b *v1alpha1.DatabaseBackup) {
		b.Spec.Storage.S3.CASecretRef = &v1alpha1.SecretKeyRef{Name: "minio-ca", Key: "root.pem"}
	})
	pod := waitJobs(t, ns, 1)[0].Spec.Template.Spec
	if args := strings.Join(pod.Containers[0].Args, " "); !strings.Contains(args, "--s3-ca-file=/etc/daytwo/s3-ca/ca.crt") {
		t.Errorf("args %q lack the CA file", args)
	}
	found := false
	for _, v := range pod.Volumes {
		if s := v.Secret; s != nil && s.SecretName == "minio-ca" && len(s.Items) == 1 && s.Items[0].Key == "root.pem" && s.Items[0].Path == "ca.crt" {
			found = true
		}
	}
	mounted := false
	for _, m := range pod.Containers[0].VolumeMounts {
		mounted = mounted || m.MountPath == "/etc/daytwo/s3-ca"
	}
	if !found || !mounted {
		t.Errorf("the CA Secret is not mounted: volumes %+v, mounts %+v", pod.Volumes, pod.Containers[0].VolumeMounts)
	}
}

// A series key the spec names must exist: until it does nothing runs, and
// the condition names the field.
func TestNamedSeriesKeyMustExist(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) {
		b.Spec.SeriesKeySecretRef = &v1alpha1.SecretKeyRef{Name: "dr-key", Key: "series.key"}
		b.Spec.Encryption = &v1alpha1.BackupEncryption{KeySecretRef: v1alpha1.SecretKeyRef{Name: "enc-key"}}
	})
	waitNotReady(t, b, v1alpha1.ReasonSeriesKeyUnusable, "spec.seriesKeySecretRef: Secret dr-key")
	if n := len(jobs(t, ns)); n != 0 {
		t.Fatalf("%d Jobs started without the series key", n)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dr-key"},
		Data: map[string][]byte{"series.key": []byte("too short\n")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a short key named", func() (bool, error) {
		c := meta.FindStatusCondition(get(t, b).Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && strings.Contains(c.Message, `key "series.key" must hold at least 32 bytes`), nil
	})
	secret.Data["series.key"] = []byte(strings.Repeat("k", 32) + "\n")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// The encryption key next.
	reconciled(t, b)
	waitNotReady(t, b, v1alpha1.ReasonEncryptionKeyUnusable, "spec.encryption.keySecretRef: Secret enc-key")
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "enc-key"},
		Data: map[string][]byte{"key": []byte(strings.Repeat("e", 64))}}); err != nil {
		t.Fatal(err)
	}
	reconciled(t, b)
	job := waitJobs(t, ns, 1)[0]
	from := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			from[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if from[backup.SeriesKeyEnv] != "dr-key/series.key" || from[backup.EncryptionKeyEnv] != "enc-key/key" {
		t.Errorf("keys from %v", from)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nightly-series-key"}, &corev1.Secret{}); err == nil {
		t.Error("daytwo made a series key beside the one the spec names")
	}
}

// waitNotReady waits until b is not Ready for reason, with a message that
// says what.
func waitNotReady(t *testing.T, b *v1alpha1.DatabaseBackup, reason, what string) {
	t.Helper()
	got := waitCondition(t, b, v1alpha1.ConditionReady, metav1.ConditionFalse, reason)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c.Message, what) {
		t.Errorf("Ready: %s, want it to say %q", c.Message, what)
	}
}

// A web identity whose audience the API server accepts is refused, naming
// the field: its token would be an API token of the Database's
// ServiceAccount. Plain HTTP to STS is refused at the API server unless
// the storage is insecure. Neither starts a Job.
func TestWebIdentityOfAnAPIAudienceIsRefused(t *testing.T) {
	ns, b := setup(t, func(b *v1alpha1.DatabaseBackup) {
		b.Spec.Storage.S3.CredentialsSecretRef = nil
		b.Spec.Storage.S3.WebIdentity = &v1alpha1.S3WebIdentity{RoleARN: "arn:aws:iam::1:role/r", Audience: "https://kubernetes.default.svc"}
	})
	got := waitCondition(t, b, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c.Message, "spec.storage.s3.webIdentity.audience") {
		t.Errorf("message %q does not name the field", c.Message)
	}
	if n := len(jobs(t, ns)); n != 0 {
		t.Fatalf("%d Jobs for a refused web identity", n)
	}
	bad := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"},
			Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "backups",
				WebIdentity: &v1alpha1.S3WebIdentity{RoleARN: "r", STSEndpoint: "http://sts.example.com"}}}}}
	if err := env.Client.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "stsEndpoint") {
		t.Errorf("plain-HTTP STS: %v, want Invalid naming stsEndpoint", err)
	}
}
