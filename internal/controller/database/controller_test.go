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
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/internal/operator"
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

// A pod that carries a Database's labels but that its StatefulSet does not
// control (anyone who can create pods can make one) is no instance: it is
// neither asked for its status, nor labelled, nor sent the API token.
func TestLookAlikePodIsNoInstance(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "app"))
	waitStatefulSet(t, ns, "app")
	fakeStatefulSetController(t, ns, "app", "rev-1")
	sts, _ := get(ns, "app", &appsv1.StatefulSet{})
	fake := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: ns, Labels: sts.Spec.Template.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}}}
	create(t, fake)
	updateStatus(t, fake, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	})
	db, _ := get(ns, "app", &v1alpha1.Database{})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	eventually(t, "the new generation observed", func() (bool, error) {
		d, err := get(ns, "app", &v1alpha1.Database{})
		return err == nil && d.Status.ObservedGeneration == d.Generation, err
	})
	d, _ := get(ns, "app", &v1alpha1.Database{})
	for _, s := range d.Status.InstanceStatuses {
		if s.Name == "app-1" {
			t.Errorf("the look-alike pod is listed as an instance: %+v", s)
		}
	}
	if d.Status.ReadyInstances != 1 {
		t.Errorf("readyInstances %d, want 1 (the look-alike counted)", d.Status.ReadyInstances)
	}
	if p, _ := get(ns, "app-1", &corev1.Pod{}); p.Labels[database.LabelRole] != "" {
		t.Errorf("the look-alike pod was labelled %s", p.Labels[database.LabelRole])
	}
}

func TestRestartOnlyChangeRollsThePod(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "app"))
	waitStatefulSet(t, ns, "app")
	fakeStatefulSetController(t, ns, "app", "rev-1")
	db := waitCondition(t, ns, "app", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAvailable)
	eventually(t, "pod 0 labelled primary", func() (bool, error) {
		p, err := get(ns, "app-0", &corev1.Pod{})
		return err == nil && p.Labels["daytwo.dev/role"] == "primary", err
	})
	if db.Status.Primary != "app-0" || db.Status.ReadyInstances != 1 {
		t.Errorf("status: primary %q ready %d", db.Status.Primary, db.Status.ReadyInstances)
	}

	// A reloadable setting changes the ConfigMap only: no new revision. The
	// reconcile of the new generation applies the StatefulSet before it
	// writes status.observedGeneration.
	sts, _ := get(ns, "app", &appsv1.StatefulSet{})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"work_mem": "8MB"} })
	eventually(t, "work_mem in the ConfigMap, generation observed", func() (bool, error) {
		cm, err := get(ns, "app-config", &corev1.ConfigMap{})
		if err != nil || !strings.Contains(cm.Data["postgresql.conf"], "work_mem = '8MB'") {
			return false, err
		}
		d, err := get(ns, "app", &v1alpha1.Database{})
		return err == nil && d.Status.ObservedGeneration == db.Generation, err
	})
	if now, _ := get(ns, "app", &appsv1.StatefulSet{}); now.Generation != sts.Generation {
		t.Errorf("a reloadable setting changed the pod template (generation %d -> %d)", sts.Generation, now.Generation)
	}

	// A restart-only one changes the template; the operator restarts pod 0.
	pod0, _ := get(ns, "app-0", &corev1.Pod{})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters["shared_buffers"] = "64MB" })
	eventually(t, "a new template generation", func() (bool, error) {
		now, err := get(ns, "app", &appsv1.StatefulSet{})
		return err == nil && now.Generation > sts.Generation, err
	})
	// Publish the new revision but keep pod 0 on the old one.
	updateStatus(t, sts, func(s *appsv1.StatefulSet) {
		s.Status.ObservedGeneration, s.Status.UpdateRevision = s.Generation, "rev-2"
	})
	eventually(t, "pod 0 restarted", func() (bool, error) {
		p, err := get(ns, "app-0", &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && (p.UID != pod0.UID || !p.DeletionTimestamp.IsZero()), err
	})
	db = waitCondition(t, ns, "app", v1alpha1.ConditionPendingRestart, metav1.ConditionTrue, v1alpha1.ReasonRestartRequired)
	if msg := condition(db, v1alpha1.ConditionPendingRestart).Message; !strings.Contains(msg, "shared_buffers") || strings.Contains(msg, "work_mem") {
		t.Errorf("PendingRestart message = %q", msg)
	}
	fakeStatefulSetController(t, ns, "app", "rev-2")
	waitCondition(t, ns, "app", v1alpha1.ConditionPendingRestart, metav1.ConditionFalse, v1alpha1.ReasonUpToDate)
}

func TestScaleSubresourceAndBudget(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "scaled")
	create(t, db)
	waitStatefulSet(t, ns, "scaled")
	if _, err := get(ns, "scaled-primary", &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("a single instance got the primary's PodDisruptionBudget: %v", err)
	}
	if _, err := get(ns, "scaled", &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("a single instance got a PodDisruptionBudget: %v", err)
	}
	// What `kubectl scale database/scaled --replicas=3` sends. (A GET of the
	// scale subresource answers only once spec.instances is set: the API
	// server does not know the tier's default.)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))
	if err := env.Client.SubResource("scale").Patch(ctx, db, patch, client.WithSubResourceBody(&autoscalingv1.Scale{})); err != nil {
		t.Fatalf("scale: %v", err)
	}
	eventually(t, "3 replicas and a budget", func() (bool, error) {
		sts, err := get(ns, "scaled", &appsv1.StatefulSet{})
		if err != nil || *sts.Spec.Replicas != 3 {
			return false, err
		}
		_, err = get(ns, "scaled", &policyv1.PodDisruptionBudget{})
		return err == nil, client.IgnoreNotFound(err)
	})
	eventually(t, "status.instances 3", func() (bool, error) {
		d, err := get(ns, "scaled", &v1alpha1.Database{})
		return err == nil && d.Status.Instances == 3, err
	})
}

// upgradeJobOf waits for the upgrade Job the operator makes once every
// instance is stopped (envtest runs no pods, so that is at once).
func upgradeJobOf(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	eventually(t, "the upgrade Job", func() (bool, error) {
		j, err := get(ns, name+"-upgrade", &batchv1.Job{})
		job = j
		return err == nil, client.IgnoreNotFound(err)
	})
	return job
}

// finishJob writes the terminal status the Job controller would.
func finishJob(t *testing.T, job *batchv1.Job, ok bool) {
	t.Helper()
	testenv.FinishJob(job, metav1.Now(), ok)
	if err := env.Client.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}

func TestMajorUpgradeRunsAJobOnTheStoppedPrimary(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "legacy", func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](2) })
	create(t, db)
	waitStatefulSet(t, ns, "legacy")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Version = "17" })

	// Every instance stops, on the old image, and a Job upgrades the primary's volume.
	job := upgradeJobOf(t, ns, "legacy")
	sts, _ := get(ns, "legacy", &appsv1.StatefulSet{})
	if sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("the instances stop for the upgrade with claim retention %+v: their volumes would go with them",
			sts.Spec.PersistentVolumeClaimRetentionPolicy)
	}
	if *sts.Spec.Replicas != 0 || sts.Spec.Template.Spec.Containers[0].Image != "postgres:15" || sts.Annotations["daytwo.dev/upgrading"] != "15-17" {
		t.Fatalf("StatefulSet during the upgrade: replicas %d, image %s, annotations %v",
			*sts.Spec.Replicas, sts.Spec.Template.Spec.Containers[0].Image, sts.Annotations)
	}
	pod := job.Spec.Template.Spec
	if pod.InitContainers[len(pod.InitContainers)-1].Image != "postgres:15" || pod.Containers[0].Image != "postgres:17" {
		t.Errorf("Job images: old programs from %s, upgrade in %s", pod.InitContainers[len(pod.InitContainers)-1].Image, pod.Containers[0].Image)
	}
	if got := strings.Join(pod.InitContainers[len(pod.InitContainers)-1].Command, " "); !strings.Contains(got, "bundle --major 15") {
		t.Errorf("bundle command: %s", got)
	}
	if got := strings.Join(pod.Containers[0].Args, " "); !strings.Contains(got, "--upgrade-only") || !strings.Contains(got, "--upgrade-from=/upgrade") {
		t.Errorf("upgrade args: %s", got)
	}
	claim := ""
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if job.Annotations["daytwo.dev/upgrading"] != "15-17" {
		t.Errorf("the Job does not name its attempt: %v", job.Annotations)
	}
	if claim != "pgdata-legacy-0" || job.Spec.Template.Labels["daytwo.dev/database"] != "" || *job.Spec.BackoffLimit != 0 {
		t.Errorf("Job: claim %q, labels %v (must not select as an instance), backoff %d", claim, job.Spec.Template.Labels, *job.Spec.BackoffLimit)
	}
	d, _ := get(ns, "legacy", &v1alpha1.Database{})
	if u := d.Status.Upgrade; u == nil || u.From != "15" || u.To != "17" || u.StartTime == nil || d.Status.Phase != v1alpha1.DatabasePhaseUpgrading {
		t.Fatalf("status during the upgrade: phase %s, upgrade %+v", d.Status.Phase, d.Status.Upgrade)
	}

	// The Job fails: the instances come back on the old image, and the
	// version is held back until spec.version changes.
	finishJob(t, job, false)
	d = waitCondition(t, ns, "legacy", v1alpha1.ConditionUpgradeFailed, metav1.ConditionTrue, v1alpha1.ReasonMajorUpgradeFailed)
	sts, _ = get(ns, "legacy", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 2 || sts.Spec.Template.Spec.Containers[0].Image != "postgres:15" || sts.Annotations["daytwo.dev/upgrade-failed"] != "17/" {
		t.Fatalf("StatefulSet after the failed upgrade: replicas %d, image %s, annotations %v",
			*sts.Spec.Replicas, sts.Spec.Template.Spec.Containers[0].Image, sts.Annotations)
	}
	if u := d.Status.Upgrade; u == nil || !strings.Contains(u.Message, "backoff limit") || d.Status.CurrentVersion != "15" {
		t.Fatalf("status after the failed upgrade: version %s, upgrade %+v", d.Status.CurrentVersion, d.Status.Upgrade)
	}
	eventually(t, "the failed Job removed", func() (bool, error) {
		j, err := get(ns, "legacy-upgrade", &batchv1.Job{})
		return apierrors.IsNotFound(err) || (err == nil && !j.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
	})
	eventually(t, "the failed Job gone", func() (bool, error) {
		_, err := get(ns, "legacy-upgrade", &batchv1.Job{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	// The retry annotation tries again.
	update(t, d, func(d *v1alpha1.Database) {
		d.Annotations = map[string]string{v1alpha1.AnnotationRetryUpgrade: "1"}
	})
	upgradeJobOf(t, ns, "legacy")
}

// With backup storage, a logical backup is stored before any instance
// stops; only then does the upgrade go on.
func TestMajorUpgradeTakesABackupFirst(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "careful", func(d *v1alpha1.Database) {
		d.Spec.BackupStorage = &v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}
	})
	create(t, db)
	waitStatefulSet(t, ns, "careful")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Version = "17" })
	var pre *v1alpha1.DatabaseBackup
	eventually(t, "the pre-upgrade DatabaseBackup", func() (bool, error) {
		b, err := get(ns, "careful-pre-upgrade", &v1alpha1.DatabaseBackup{})
		pre = b
		return err == nil, client.IgnoreNotFound(err)
	})
	if pre.Spec.Storage.PVC == nil || pre.Spec.DatabaseRef.Name != "careful" || pre.Annotations[v1alpha1.AnnotationBackupRequested] == "" {
		t.Fatalf("pre-upgrade DatabaseBackup: %+v %v", pre.Spec, pre.Annotations)
	}
	eventually(t, "status.upgrade BackingUp", func() (bool, error) {
		d, err := get(ns, "careful", &v1alpha1.Database{})
		return err == nil && d.Status.Upgrade != nil && d.Status.Upgrade.Phase == v1alpha1.MajorUpgradeBackingUp, err
	})
	// While it runs, every instance keeps serving and no Job exists.
	time.Sleep(2 * time.Second)
	sts, _ := get(ns, "careful", &appsv1.StatefulSet{})
	if *sts.Spec.Replicas != 1 {
		t.Fatalf("instances stopped before the pre-upgrade backup was stored: replicas %d", *sts.Spec.Replicas)
	}
	if _, err := get(ns, "careful-upgrade", &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Fatalf("upgrade Job before the backup: %v", err)
	}
	// The backup is stored: the upgrade goes on.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pre), pre); err != nil {
			return err
		}
		asked, err := time.Parse(time.RFC3339, pre.Annotations[v1alpha1.AnnotationBackupRequested])
		if err != nil {
			return err
		}
		pre.Status.Backups = []v1alpha1.StoredBackup{{ID: backup.NewID(asked), Time: metav1.Now(), SizeBytes: 1, SHA256: "x"}}
		return env.Client.Status().Update(ctx, pre)
	})
	if err != nil {
		t.Fatal(err)
	}
	upgradeJobOf(t, ns, "careful")
	d, _ := get(ns, "careful", &v1alpha1.Database{})
	if u := d.Status.Upgrade; u == nil || u.BackupID == "" {
		t.Fatalf("status.upgrade does not name the pre-upgrade backup: %+v", u)
	}
}

func TestMajorUpgradeSucceeds(t *testing.T) {
	ns := env.Namespace(t)
	// A succeeded upgrade Job of an earlier attempt whose deletion failed:
	// it must never pass for this attempt's.
	stale := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "modern-upgrade"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if err := env.Client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	finishJob(t, stale, true)
	db := newDB(ns, "modern")
	create(t, db)
	waitStatefulSet(t, ns, "modern")
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Version = "17" })
	var job *batchv1.Job
	eventually(t, "this attempt's Job, not the stale one", func() (bool, error) {
		j, err := get(ns, "modern-upgrade", &batchv1.Job{})
		job = j
		return err == nil && j.UID != stale.UID && j.Annotations["daytwo.dev/upgrading"] == "15-17", client.IgnoreNotFound(err)
	})
	if sts, _ := get(ns, "modern", &appsv1.StatefulSet{}); sts.Annotations["daytwo.dev/major"] != "15" {
		t.Fatalf("the stale Job finished the upgrade: annotations %v", sts.Annotations)
	}
	finishJob(t, job, true)
	eventually(t, "the instances on the new image", func() (bool, error) {
		sts, err := get(ns, "modern", &appsv1.StatefulSet{})
		return err == nil && *sts.Spec.Replicas == 1 && sts.Spec.Template.Spec.Containers[0].Image == "postgres:17" &&
			sts.Annotations["daytwo.dev/major"] == "17" && sts.Annotations["daytwo.dev/upgrading"] == "", err
	})
	eventually(t, "status.upgrade Starting", func() (bool, error) {
		d, err := get(ns, "modern", &v1alpha1.Database{})
		return err == nil && d.Status.Upgrade != nil && d.Status.Upgrade.Phase == v1alpha1.MajorUpgradeStarting, err
	})
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

// volume creates a claim as the StatefulSet controller would for pod 0,
// bound in advance to volumeName when one is given.
func volume(t *testing.T, ns, db, class, size string, volumeName ...string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pgdata-" + db + "-0", Namespace: ns, Labels: map[string]string{"daytwo.dev/database": db}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if len(volumeName) > 0 {
		pvc.Spec.VolumeName = volumeName[0]
	}
	create(t, pvc)
	return pvc
}

func TestStorageGrowthNeedsAnExpandableClass(t *testing.T) {
	ns := env.Namespace(t)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fixed-" + ns}, Provisioner: "example.com/fixed"}
	create(t, class)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, class) })
	db := newDB(ns, "grow", func(d *v1alpha1.Database) {
		d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To(class.Name)}
	})
	create(t, db)
	volume(t, ns, "grow", class.Name, "1Gi")
	waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionFalse, v1alpha1.ReasonUpToDate)

	update(t, db, func(d *v1alpha1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi")) })
	db = waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionTrue, v1alpha1.ReasonExpansionUnsupported)
	if msg := condition(db, v1alpha1.ConditionStorageResizePending).Message; !strings.Contains(msg, class.Name) || !strings.Contains(msg, "2Gi") {
		t.Errorf("message = %q", msg)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("512Mi")) })
	// A shrink never happens, so nothing is pending (the seed's large to
	// medium left it True for good): False, and the reason says why.
	db = waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionFalse, v1alpha1.ReasonShrinkUnsupported)
	if msg := condition(db, v1alpha1.ConditionStorageResizePending).Message; !strings.Contains(msg, "never shrink") {
		t.Errorf("message = %q", msg)
	}
}

func TestStorageGrowsWhenTheClassAllowsIt(t *testing.T) {
	ns := env.Namespace(t)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "elastic-" + ns}, Provisioner: "example.com/elastic",
		AllowVolumeExpansion: ptr.To(true)}
	create(t, class)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, class) })
	db := newDB(ns, "grow", func(d *v1alpha1.Database) {
		d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To(class.Name)}
	})
	create(t, db)
	// A bound claim, as the provisioner would leave it: only bound claims resize.
	pvc := volume(t, ns, "grow", class.Name, "1Gi", "pv-"+ns)
	updateStatus(t, pvc, func(p *corev1.PersistentVolumeClaim) {
		p.Status.Phase = corev1.ClaimBound
		p.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("3Gi")) })
	eventually(t, "the claim asking for 3Gi", func() (bool, error) {
		got, err := get(ns, pvc.Name, &corev1.PersistentVolumeClaim{})
		return err == nil && got.Spec.Resources.Requests.Storage().String() == "3Gi", err
	})
	waitCondition(t, ns, "grow", v1alpha1.ConditionStorageResizePending, metav1.ConditionTrue, v1alpha1.ReasonResizing)
}

func TestDeletionPolicies(t *testing.T) {
	t.Run("Delete removes the volumes", func(t *testing.T) {
		ns := env.Namespace(t)
		db := newDB(ns, "gone", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete })
		create(t, db)
		waitCondition(t, ns, "gone", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "gone", "standard", "1Gi")
		if err := env.Client.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Database gone and its volume deleted", func() (bool, error) {
			_, err := get(ns, "gone", &v1alpha1.Database{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
			pvc, err := get(ns, "pgdata-gone-0", &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
		})
	})
	t.Run("Retain keeps the volumes and the Secret", func(t *testing.T) {
		ns := env.Namespace(t)
		db := newDB(ns, "kept")
		create(t, db)
		waitCondition(t, ns, "kept", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "kept", "standard", "1Gi")
		secret, _ := get(ns, "kept-credentials", &corev1.Secret{})
		if _, err := get(ns, "kept-ca", &corev1.Secret{}); err != nil {
			t.Fatalf("no CA: %v", err)
		}
		if err := env.Client.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Database gone", func() (bool, error) {
			_, err := get(ns, "kept", &v1alpha1.Database{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		pvc, err := get(ns, "pgdata-kept-0", &corev1.PersistentVolumeClaim{})
		if err != nil || !pvc.DeletionTimestamp.IsZero() {
			t.Fatalf("the volume was not kept: %v", err)
		}
		for _, name := range []string{"kept-credentials", "kept-ca"} {
			s, err := get(ns, name, &corev1.Secret{})
			if err != nil || len(s.OwnerReferences) != 0 {
				t.Fatalf("Secret %s was not released: %v %v", name, err, s.OwnerReferences)
			}
		}
		eventually(t, "a Retained event", func() (bool, error) {
			list := &corev1.EventList{}
			err := env.Client.List(ctx, list, client.InNamespace(ns))
			for _, e := range list.Items {
				if e.Reason == "Retained" && strings.Contains(e.Message, "pgdata-kept-0") && strings.Contains(e.Message, "kept-credentials") {
					return true, nil
				}
			}
			return false, err
		})
		// Created again, the Database takes the kept Secret back unchanged.
		create(t, newDB(ns, "kept"))
		eventually(t, "the Secret taken back", func() (bool, error) {
			s, err := get(ns, "kept-credentials", &corev1.Secret{})
			return err == nil && metav1.GetControllerOf(s) != nil, err
		})
		s, _ := get(ns, "kept-credentials", &corev1.Secret{})
		if string(s.Data["password"]) != string(secret.Data["password"]) {
			t.Fatal("the kept password was replaced")
		}
	})
	t.Run("Snapshot is refused without backup storage", func(t *testing.T) {
		ns := env.Namespace(t)
		err := env.Client.Create(ctx, newDB(ns, "snap", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot }))
		if err == nil || !strings.Contains(err.Error(), "backupStorage") {
			t.Fatalf("created without backup storage: %v", err)
		}
	})
	t.Run("Snapshot takes a final backup first", func(t *testing.T) {
		ns := env.Namespace(t)
		db := newDB(ns, "snap", func(d *v1alpha1.Database) {
			d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot
			d.Spec.BackupStorage = &v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}
		})
		create(t, db)
		waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "snap", "standard", "1Gi")
		if err := env.Client.Delete(ctx, db); err != nil {
			t.Fatal(err)
		}
		db = waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting)
		if db.Status.Phase != v1alpha1.DatabasePhaseDeleting || !strings.Contains(condition(db, v1alpha1.ConditionReady).Message, "snap-final") {
			t.Errorf("phase %s, %+v", db.Status.Phase, condition(db, v1alpha1.ConditionReady))
		}
		final, err := get(ns, "snap-final", &v1alpha1.DatabaseBackup{})
		if err != nil {
			t.Fatalf("no final DatabaseBackup: %v", err)
		}
		if final.Spec.DatabaseRef.Name != "snap" || final.Spec.Storage.PVC == nil || final.Spec.Schedule != "" || len(final.OwnerReferences) != 0 {
			t.Errorf("final DatabaseBackup spec %+v owners %v", final.Spec, final.OwnerReferences)
		}
		// Play the backup Job's success: the Database then lets go, volumes included.
		// (The DatabaseBackup controller writes this status too: retry on conflicts.)
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(final), final); err != nil {
				return err
			}
			final.Status.LastBackupTime = &metav1.Time{Time: time.Now()}
			asked, err := time.Parse(time.RFC3339, final.Annotations[v1alpha1.AnnotationBackupRequested])
			if err != nil {
				return err
			}
			final.Status.Backups = []v1alpha1.StoredBackup{{ID: backup.NewID(asked), Time: metav1.Now(), SizeBytes: 1, SHA256: "x"}}
			return env.Client.Status().Update(ctx, final)
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Database gone and its volume deleted", func() (bool, error) {
			_, err := get(ns, "snap", &v1alpha1.Database{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
			pvc, err := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero()), client.IgnoreNotFound(err)
		})
		if _, err := get(ns, "snap-final", &v1alpha1.DatabaseBackup{}); err != nil {
			t.Errorf("the final DatabaseBackup did not outlive the Database: %v", err)
		}

		// A Database of the same name (restored from snap-final, say) and
		// deleted again: the earlier final backup does not count for it.
		// envtest runs no garbage collector or Job controller: play their
		// part for the first Database and its (never finishing) backup Job.
		jobs := &batchv1.JobList{}
		if err := env.Client.List(ctx, jobs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range jobs.Items {
			_ = env.Client.Delete(ctx, &jobs.Items[i], client.PropagationPolicy(metav1.DeletePropagationBackground))
		}
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-credentials"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-replication"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-config"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-rw"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-ro"}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance-api"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-ca"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-server-tls"}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-primary"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance"}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap-instance"}},
		} {
			_ = env.Client.Delete(ctx, obj)
		}
		pvc, _ := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{})
		update(t, pvc, func(p *corev1.PersistentVolumeClaim) { p.Finalizers = nil })
		eventually(t, "the first volume gone", func() (bool, error) {
			_, err := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		again := newDB(ns, "snap", func(d *v1alpha1.Database) {
			d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionSnapshot
			d.Spec.BackupStorage = &v1alpha1.BackupStorage{PVC: &v1alpha1.PVCStorage{ClaimName: "backups"}}
		})
		create(t, again)
		waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPrimaryNotReady)
		volume(t, ns, "snap", "standard", "1Gi")
		// Deletion times have whole seconds; this one must differ from the first.
		for firstAsked, _ := time.Parse(time.RFC3339, final.Annotations[v1alpha1.AnnotationBackupRequested]); time.Now().Unix() <= firstAsked.Unix()+1; {
			time.Sleep(100 * time.Millisecond)
		}
		if err := env.Client.Delete(ctx, again); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the final DatabaseBackup asked for a run for the new Database", func() (bool, error) {
			final, err := get(ns, "snap-final", &v1alpha1.DatabaseBackup{})
			return err == nil && final.Annotations[v1alpha1.AnnotationFinalBackupOfUID] == string(again.UID) &&
				final.Annotations[v1alpha1.AnnotationBackupRequested] != "", err
		})
		final, _ = get(ns, "snap-final", &v1alpha1.DatabaseBackup{})
		requested, _ := time.Parse(time.RFC3339, final.Annotations[v1alpha1.AnnotationBackupRequested])
		eventually(t, "a backup Job for the requested run", func() (bool, error) {
			jobs := &batchv1.JobList{}
			err := env.Client.List(ctx, jobs, client.InNamespace(ns))
			for _, j := range jobs.Items {
				if j.Name == fmt.Sprintf("snap-final-%d", requested.Unix()) {
					return true, nil
				}
			}
			return false, err
		})
		waitCondition(t, ns, "snap", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting)
		if pvc, err := get(ns, "pgdata-snap-0", &corev1.PersistentVolumeClaim{}); err != nil || !pvc.DeletionTimestamp.IsZero() {
			t.Fatalf("the volume went before the new final backup: %v", err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(final), final); err != nil {
				return err
			}
			final.Status.LastBackupTime = &metav1.Time{Time: time.Now()}
			final.Status.Backups = []v1alpha1.StoredBackup{{ID: backup.NewID(requested), Time: metav1.Now(), SizeBytes: 1, SHA256: "y"}}
			return env.Client.Status().Update(ctx, final)
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the second Database gone after its own final backup", func() (bool, error) {
			_, err := get(ns, "snap", &v1alpha1.Database{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
}

// A retained volume with another Database's data: the pod says so in its
// termination message and the Database reports it; re-using the data is an
// annotation the instance manager receives as a flag.
func TestDataConflictIsReported(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "orders")
	create(t, db)
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "orders", sts); return err == nil, client.IgnoreNotFound(err) })
	args := strings.Join(sts.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--database-uid="+string(db.UID)) || !strings.Contains(args, "--bootstrap-source=initdb") ||
		strings.Contains(args, "--reuse-data") {
		t.Fatalf("instance manager args: %s", args)
	}
	fakeStatefulSetController(t, ns, "orders", "rev-1")
	pod, _ := get(ns, "orders-0", &corev1.Pod{})
	msg := "data conflict: the volume holds data of an earlier Database (uid x, bootstrap initdb); set the annotation daytwo.dev/reuse-data=true"
	updateStatus(t, pod, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "postgres", Image: "postgres:15", ImageID: "x",
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}}}
	})
	db = waitCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDataConflict)
	if got := condition(db, v1alpha1.ConditionReady).Message; got != msg {
		t.Errorf("Ready message %q", got)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Annotations = map[string]string{v1alpha1.AnnotationReuseData: "true"} })
	eventually(t, "--reuse-data in the template", func() (bool, error) {
		s, err := get(ns, "orders", &appsv1.StatefulSet{})
		return err == nil && slices.Contains(s.Spec.Template.Spec.Containers[0].Args, "--reuse-data"), err
	})
}

// An operator upgrade restarts no PostgreSQL pod: a StatefulSet made by an
// earlier operator (another instance manager image) keeps that image while
// nothing else in the pod template changes, and takes the new one with the
// next change that restarts the pods anyway.
func TestOperatorUpgradeKeepsTheInstanceManager(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "keep"))
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "keep", sts); return err == nil, client.IgnoreNotFound(err) })
	initImage := func() string {
		if _, err := get(ns, "keep", sts); err != nil {
			t.Fatal(err)
		}
		return sts.Spec.Template.Spec.InitContainers[0].Image
	}
	current := initImage()
	if current != operator.DefaultInstanceImage() {
		t.Fatalf("init container image %s, want the operator's %s", current, operator.DefaultInstanceImage())
	}

	// What an older operator applied: the same template with its own
	// image, and without the metrics port its instance manager lacked.
	const older = "localhost/daytwo:older"
	ac, err := appsv1ac.ExtractStatefulSet(sts, controller.FieldOwner)
	if err != nil {
		t.Fatal(err)
	}
	ac.Spec.Template.Spec.InitContainers[0].Image = ptr.To(older)
	postgres := &ac.Spec.Template.Spec.Containers[0]
	postgres.Ports = slices.DeleteFunc(postgres.Ports, func(p corev1ac.ContainerPortApplyConfiguration) bool { return *p.Name == "metrics" })
	if len(postgres.Ports) != 2 {
		t.Fatalf("the template's ports without metrics: %d, want 2", len(postgres.Ports))
	}
	if err := env.Client.Apply(ctx, ac, client.FieldOwner(controller.FieldOwner), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}

	// A change outside the pod template: the older image stays.
	db := &v1alpha1.Database{}
	if _, err := get(ns, "keep", db); err != nil {
		t.Fatal(err)
	}
	update(t, db, func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete })
	eventually(t, "the change observed", func() (bool, error) {
		_, err := get(ns, "keep", db)
		return err == nil && db.Status.ObservedGeneration == db.Generation, err
	})
	if got := initImage(); got != older {
		t.Fatalf("a reconcile with an unchanged template moved the instance manager to %s", got)
	}
	if n := len(sts.Spec.Template.Spec.Containers[0].Ports); n != 2 {
		t.Fatalf("the kept instance manager's template has %d ports, want its 2", n)
	}

	// A restart-only setting rolls the pods anyway: with the operator's
	// image, and its metrics port.
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"max_connections": "150"} })
	eventually(t, "the new instance manager with the restart", func() (bool, error) { return initImage() == current, nil })
	if ports := sts.Spec.Template.Spec.Containers[0].Ports; len(ports) != 3 || ports[2].Name != "metrics" || ports[2].ContainerPort != 9187 {
		t.Fatalf("the new instance manager's ports: %+v, want metrics on 9187 too", ports)
	}
}

// When the primary moves, the new primary is labelled before the old one
// loses its label, so -rw never selects nothing in between (kube-proxy
// could apply that gap and keep it for its minimum sync period).
func TestNewPrimaryIsLabelledFirst(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for i, role := range []string{"primary", "replica"} {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%d", i), Namespace: ns, Labels: map[string]string{database.LabelRole: role}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:15"}}}}
		if err := env.Client.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: pods[1].ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := database.LabelRoles(&database.Reconciler{Client: env.Client}, ctx, pods, "db-1"); err != nil {
		t.Fatal(err)
	}
	var order []string
	for len(order) < 2 {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == "MODIFIED" {
				order = append(order, p.Name+"="+p.Labels[database.LabelRole])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("saw only %v", order)
		}
	}
	if want := []string{"db-1=primary", "db-0=replica"}; !slices.Equal(order, want) {
		t.Fatalf("labels changed in the order %v, want %v", order, want)
	}
}

// A primary whose pod is being deleted releases its lease once postgres
// stops: failover waits for that within the reconcile, reads the released
// lease, and gives up once the deletion is releaseWait (3 s) old. Any other
// primary is not waited for.
func TestFailoverWaitsForATerminatingPrimarysRelease(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "db")
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-primary", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("db-0"), RenewTime: &now, AcquireTime: &now, LeaseDurationSeconds: ptr.To[int32](60)}}
	create(t, lease)
	// deletedAt is db-0 deleted at t with a 30 s grace period (the
	// deletion timestamp is the end of it).
	deletedAt := func(at time.Time) []corev1.Pod {
		end := metav1.NewTime(at.Add(30 * time.Second))
		return []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: ns, DeletionTimestamp: &end, DeletionGracePeriodSeconds: ptr.To[int64](30)}},
			{ObjectMeta: metav1.ObjectMeta{Name: "db-1", Namespace: ns}},
		}
	}
	r := &database.Reconciler{Client: env.Client, Clock: clock.RealClock{}}

	start := time.Now()
	running := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "db-1"}}}
	if waited, l := database.AwaitRelease(ctx, r, db, lease, running, "db-0"); waited != 0 || l != lease {
		t.Fatalf("waited %s for a primary that is not being deleted", waited)
	}
	if waited, _ := database.AwaitRelease(ctx, r, db, lease, deletedAt(time.Now())[:1], "db-0"); waited != 0 {
		t.Fatalf("waited %s for the only instance", waited)
	}
	if waited, _ := database.AwaitRelease(ctx, r, db, lease, deletedAt(time.Now().Add(-5*time.Second)), "db-0"); waited != 0 {
		t.Fatalf("waited %s for a release 5 s after the deletion", waited)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("the cases that must not wait took %s", time.Since(start))
	}

	start = time.Now()
	if waited, l := database.AwaitRelease(ctx, r, db, lease, deletedAt(start.Add(-time.Second)), "db-0"); waited != 0 || l.Spec.RenewTime == nil {
		t.Fatalf("a lease never released: waited %s, renewTime %v", waited, l.Spec.RenewTime)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up on the release %s after a deletion 1 s old, want about 2 s", took)
	}

	type release struct {
		at  time.Time
		err error
	}
	released := make(chan release, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), l); err != nil {
				return err
			}
			l.Spec.RenewTime = nil
			return env.Client.Update(ctx, l)
		})
		released <- release{time.Now(), err}
	}()
	start = time.Now()
	waited, l := database.AwaitRelease(ctx, r, db, lease, deletedAt(start), "db-0")
	rel := <-released
	if rel.err != nil {
		t.Fatal(rel.err)
	}
	if waited < 300*time.Millisecond || l.Spec.RenewTime != nil {
		t.Fatalf("waited %s, renewTime %v: want the released lease after at least 300 ms", waited, l.Spec.RenewTime)
	}
	if lag := start.Add(waited).Sub(rel.at); lag > 500*time.Millisecond {
		t.Fatalf("saw the release %s after it was written", lag)
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
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:15"}}}})
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

// A scale-down never removes the primary's pod (the StatefulSet deletes
// the highest ordinals): it waits, saying so, for a switchover to move the
// primary to an instance that stays, and shrinks once the lease names one.
func TestScaleDownNeverRemovesThePrimary(t *testing.T) {
	ns := env.Namespace(t)
	db := newDB(ns, "db", func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](3) })
	create(t, db)
	lease := &coordinationv1.Lease{}
	eventually(t, "3 replicas and the primary lease", func() (bool, error) {
		sts, err := get(ns, "db", &appsv1.StatefulSet{})
		if err != nil || *sts.Spec.Replicas != 3 {
			return false, client.IgnoreNotFound(err)
		}
		_, err = get(ns, "db-primary", lease)
		return err == nil, client.IgnoreNotFound(err)
	})
	// db-2 is the primary, its lease valid for a minute.
	now := metav1.NewMicroTime(time.Now())
	update(t, lease, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To("db-2"), &now, &now
		l.Spec.LeaseDurationSeconds = ptr.To[int32](60)
	})
	update(t, db, func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To[int32](2) })
	held := waitCondition(t, ns, "db", v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonSwitchoverPending)
	if c := condition(held, v1alpha1.ConditionProgressing); !strings.Contains(c.Message, "removes db-2, the primary") {
		t.Errorf("Progressing says %q", c.Message)
	}
	if sts, err := get(ns, "db", &appsv1.StatefulSet{}); err != nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("the StatefulSet shrank under its primary: %v replicas (%v)", ptr.Deref(sts.Spec.Replicas, 0), err)
	}
	// The switchover (the instances do it; envtest runs none) moves the lease.
	update(t, lease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("db-0") })
	eventually(t, "2 replicas once the primary stays", func() (bool, error) {
		sts, err := get(ns, "db", &appsv1.StatefulSet{})
		return err == nil && *sts.Spec.Replicas == 2, err
	})
}
