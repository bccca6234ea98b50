package database_test

// envtest: a real kube-apiserver with the real CRDs and the operator running.
// No StatefulSet controller or kubelet runs here, so where a test needs pods
// it creates them as the StatefulSet controller would (revision label,
// template annotations, Ready condition); the real node e2e suite covers the
// rest.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, operator.Options{}) }

var ctx = context.Background()

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}

func update[T client.Object](t *testing.T, obj T, mutate func(T)) {
	t.Helper()
	env.Update(t, obj, func() { mutate(obj) })
}

func updateStatus[T client.Object](t *testing.T, obj T, mutate func(T)) {
	t.Helper()
	env.UpdateStatus(t, obj, func() { mutate(obj) })
}

func newDB(ns, name string, mutate ...func(*v1alpha1.Database)) *v1alpha1.Database {
	db := &v1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.DatabaseSpec{Version: "15"},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func get[T client.Object](ns, name string, obj T) (T, error) {
	return obj, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
}

func condition(db *v1alpha1.Database, typ string) *metav1.Condition {
	return meta.FindStatusCondition(db.Status.Conditions, typ)
}

// waitCondition waits until the Database's condition has status and reason
// and returns the Database.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.Database {
	t.Helper()
	db := &v1alpha1.Database{}
	eventually(t, fmt.Sprintf("%s=%s (%s)", typ, status, reason), func() (bool, error) {
		if _, err := get(ns, name, db); err != nil {
			return false, err
		}
		c := condition(db, typ)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
	return db
}

func TestChildrenHaveTheRightShape(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "orders", func(d *v1alpha1.Database) {
		d.Spec.Size = v1alpha1.SizeMedium
		d.Spec.Parameters = map[string]string{"work_mem": "16MB"}
	}))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "orders", sts); return err == nil, client.IgnoreNotFound(err) })
	if *sts.Spec.Replicas != 2 || sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("replicas %d, strategy %s", *sts.Spec.Replicas, sts.Spec.UpdateStrategy.Type)
	}
	if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "50Gi" {
		t.Errorf("medium tier volume = %s", got.String())
	}
	if owner := metav1.GetControllerOf(sts); owner == nil || owner.Kind != "Database" {
		t.Errorf("StatefulSet not owned by the Database: %v", owner)
	}

	for name, want := range map[string]string{"orders": "", "orders-rw": "primary", "orders-ro": "replica"} {
		svc, err := get(ns, name, &corev1.Service{})
		if err != nil {
			t.Fatalf("Service %s: %v", name, err)
		}
		if svc.Spec.Selector["daytwo.dev/role"] != want {
			t.Errorf("Service %s selects role %q, want %q", name, svc.Spec.Selector["daytwo.dev/role"], want)
		}
	}
	cm, err := get(ns, "orders-config", &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if conf := cm.Data["postgresql.conf"]; !strings.Contains(conf, "shared_buffers = '1GB'") || !strings.Contains(conf, "work_mem = '16MB'\t# user") {
		t.Errorf("rendered configuration:\n%s", conf)
	}
	// Both budgets: they are applied one after the other.
	eventually(t, "the PodDisruptionBudgets for 2 instances", func() (bool, error) {
		_, err := get(ns, "orders", &policyv1.PodDisruptionBudget{})
		if err == nil {
			_, err = get(ns, "orders-primary", &policyv1.PodDisruptionBudget{})
		}
		return err == nil, client.IgnoreNotFound(err)
	})
	// Two budgets that never select the same pod (the eviction API refuses
	// such a pod): one replica at a time, and never the primary.
	for name, want := range map[string]string{"orders": "replica", "orders-primary": "primary"} {
		b, err := get(ns, name, &policyv1.PodDisruptionBudget{})
		if err != nil {
			t.Fatalf("PodDisruptionBudget %s: %v", name, err)
		}
		if got := b.Spec.Selector.MatchLabels["daytwo.dev/role"]; got != want {
			t.Errorf("PodDisruptionBudget %s selects role %q, want %q", name, got, want)
		}
	}
	if b, _ := get(ns, "orders-primary", &policyv1.PodDisruptionBudget{}); b.Spec.MaxUnavailable == nil || b.Spec.MaxUnavailable.IntValue() != 0 || b.Spec.MinAvailable != nil {
		t.Errorf("the primary's budget allows its eviction: %+v", b.Spec)
	}
	// maxUnavailable would count the primary too and allow no eviction.
	if b, _ := get(ns, "orders", &policyv1.PodDisruptionBudget{}); b.Spec.MinAvailable == nil || b.Spec.MinAvailable.IntValue() != 0 {
		t.Errorf("the replicas' budget of 2 instances: %+v", b.Spec)
	}
	secret, err := get(ns, "orders-credentials", &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	password := string(secret.Data["password"])
	if len(password) != 32 || string(secret.Data["uri"]) != "postgresql://app:"+password+"@orders-rw."+ns+".svc:5432/app?sslmode=verify-full" {
		t.Errorf("credentials Secret: %q", secret.Data["uri"])
	}
	if _, err := get(ns, "orders-replication", &corev1.Secret{}); err != nil {
		t.Errorf("replication Secret: %v", err)
	}

	db := waitCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
	st := db.Status
	if st.Phase != v1alpha1.DatabasePhaseCreating || st.Instances != 2 || st.Endpoint != "orders-rw."+ns+".svc:5432" ||
		st.SecretName != "orders-credentials" || st.CurrentVersion != "15" || st.Selector != "daytwo.dev/database=orders" {
		t.Errorf("status = %+v", st)
	}
	sources := map[string]v1alpha1.EffectiveParameter{}
	for _, p := range st.Parameters {
		sources[p.Name] = p
	}
	if sources["shared_buffers"].Source != v1alpha1.ParameterTuned || sources["work_mem"] != (v1alpha1.EffectiveParameter{Name: "work_mem", Value: "16MB", Source: v1alpha1.ParameterUser}) {
		t.Errorf("status.parameters: shared_buffers %+v, work_mem %+v", sources["shared_buffers"], sources["work_mem"])
	}
	raw, _ := json.Marshal(db.Status)
	if strings.Contains(string(raw), password) {
		t.Fatal("the password appears in the status")
	}

	// Drift is repaired, and the Secret is never regenerated.
	if err := env.Client.Delete(ctx, sts); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters["work_mem"] = "32MB" })
	eventually(t, "the StatefulSet to come back", func() (bool, error) {
		s, err := get(ns, "orders", &appsv1.StatefulSet{})
		return err == nil && s.UID != sts.UID, client.IgnoreNotFound(err)
	})
	eventually(t, "the new work_mem in the ConfigMap", func() (bool, error) {
		cm, err := get(ns, "orders-config", &corev1.ConfigMap{})
		return err == nil && strings.Contains(cm.Data["postgresql.conf"], "work_mem = '32MB'"), err
	})
	again, _ := get(ns, "orders-credentials", &corev1.Secret{})
	if string(again.Data["password"]) != password {
		t.Fatal("the credentials Secret was regenerated")
	}
	assertNoPasswordInEvents(t, ns, password)
}

func assertNoPasswordInEvents(t *testing.T, ns, password string) {
	t.Helper()
	list := &corev1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Message, password) {
			t.Fatalf("event %s carries the password", e.Name)
		}
	}
}

// fakeStatefulSetController does what the StatefulSet controller would for
// the StatefulSet's current template: publishes revision rev and creates or
// replaces pod 0 on it, Ready.
func fakeStatefulSetController(t *testing.T, ns, name, rev string) {
	t.Helper()
	sts, err := get(ns, name, &appsv1.StatefulSet{})
	if err != nil {
		t.Fatal(err)
	}
	updateStatus(t, sts, func(s *appsv1.StatefulSet) {
		s.Status.ObservedGeneration = s.Generation
		s.Status.UpdateRevision, s.Status.CurrentRevision = rev, rev
		s.Status.Replicas = *s.Spec.Replicas
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: map[string]string{}, Annotations: sts.Spec.Template.Annotations,
			OwnerReferences: ownedBy(sts)},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
	}
	for k, v := range sts.Spec.Template.Labels {
		pod.Labels[k] = v
	}
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = rev
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "pgdata", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pgdata-" + pod.Name}}})
	create(t, pod)
	updateStatus(t, pod, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	})
}

// waitStatefulSet waits for the Database's StatefulSet and returns it.
func waitStatefulSet(t *testing.T, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) {
		_, err := get(ns, name, sts)
		return err == nil, client.IgnoreNotFound(err)
	})
	return sts
}

// ownedBy is the controller reference the StatefulSet controller gives its pods.
func ownedBy(sts *appsv1.StatefulSet) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
}

func TestInvalidImageForVersion(t *testing.T) {
	ns := env.Namespace(t)
	err := env.Client.Create(ctx, newDB(ns, "mixed", func(d *v1alpha1.Database) { d.Spec.Image = "postgres:16.1" }))
	if err == nil || !strings.Contains(err.Error(), "spec.image") {
		t.Fatalf("an image of another major was admitted: %v", err)
	}
	if _, err := get(ns, "mixed", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet was created for an invalid spec: %v", err)
	}
}

// A spec the controller cannot carry out (here a synchronous number at the
// instance count, which only the controller checks) stops what it would
// change, and says so, but never what keeps the Database available: the
// lease is still followed (the primary's pod labelled, so -rw routes to it),
// and failover and certificate renewal go on.
func TestInvalidSpecKeepsHighAvailability(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "db", func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeMedium })
	create(t, db)
	sts := waitStatefulSet(t, ns, "db")
	for i, role := range []string{"primary", "replica"} {
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%d", i), Namespace: ns, OwnerReferences: ownedBy(sts),
			Labels: map[string]string{"daytwo.dev/database": "db", database.LabelRole: role}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: postgres.DefaultImage("15")}}}})
	}
	lease := &coordinationv1.Lease{}
	eventually(t, "the primary lease", func() (bool, error) {
		_, err := get(ns, "db-primary", lease)
		return err == nil, client.IgnoreNotFound(err)
	})
	update(t, db, func(d *v1alpha1.Database) {
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 2}}
	})
	waitCondition(t, ns, "db", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	// The lease moves (a failover, or a switchover the instances made).
	update(t, lease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("db-1") })
	eventually(t, "db-1 labelled the primary under an invalid spec", func() (bool, error) {
		p, err := get(ns, "db-1", &corev1.Pod{})
		return err == nil && p.Labels[database.LabelRole] == "primary", err
	})
}

// storeRequestedBackup plays a backup Job's success for b's requested run:
// the DatabaseBackup's status records it, as its controller would (which
// writes this status too: retry on conflicts).
func storeRequestedBackup(t *testing.T, b *v1alpha1.DatabaseBackup) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		asked, err := time.Parse(time.RFC3339, b.Annotations[v1alpha1.AnnotationBackupRequested])
		if err != nil {
			return err
		}
		b.Status.LastBackupTime = &metav1.Time{Time: time.Now()}
		b.Status.Backups = []v1alpha1.StoredBackup{{ID: backup.NewID(asked), Time: metav1.Now(), SizeBytes: 1, SHA256: "x"}}
		return env.Client.Status().Update(ctx, b)
	})
	if err != nil {
		t.Fatal(err)
	}
}
