package database

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

func newDB(mutate ...func(*v1alpha1.Database)) *v1alpha1.Database {
	db := &v1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "uid-1", Generation: 3},
		Spec: v1alpha1.DatabaseSpec{Version: "15", Size: v1alpha1.SizeSmall,
			Bootstrap: &v1alpha1.DatabaseBootstrap{InitDB: &v1alpha1.BootstrapInitDB{Database: "orders", Owner: "shop"}}},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func TestPlanTiers(t *testing.T) {
	tests := []struct {
		name          string
		db            *v1alpha1.Database
		instances     int32
		cpuReq, mem   string
		storage       string
		sharedBuffers string
		image         string
	}{
		{"small", newDB(), 1, "250m", "1Gi", "10Gi", "256MB", "postgres:15"},
		{"medium", newDB(func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeMedium }), 2, "500m", "4Gi", "50Gi", "1GB", "postgres:15"},
		{"large", newDB(func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeLarge }), 3, "1", "16Gi", "200Gi", "4GB", "postgres:15"},
		{"explicit overrides win", newDB(func(d *v1alpha1.Database) {
			d.Spec.Size = v1alpha1.SizeLarge
			d.Spec.Instances = ptr.To[int32](1)
			d.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}
			d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("2Gi"))}
			d.Spec.Image = "localhost/postgres:15-next"
		}), 1, "100m", "512Mi", "2Gi", "128MB", "localhost/postgres:15-next"},
		{"user parameter wins", newDB(func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"shared_buffers": "300MB"} }),
			1, "250m", "1Gi", "10Gi", "300MB", "postgres:15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlan(tt.db)
			if p.instances != tt.instances {
				t.Errorf("instances = %d, want %d", p.instances, tt.instances)
			}
			if got := p.resources.Requests.Cpu(); got.Cmp(resource.MustParse(tt.cpuReq)) != 0 {
				t.Errorf("cpu request = %s, want %s", got, tt.cpuReq)
			}
			if got := p.resources.Requests.Memory(); got.Cmp(resource.MustParse(tt.mem)) != 0 {
				t.Errorf("memory request = %s, want %s", got, tt.mem)
			}
			if p.storage.Cmp(resource.MustParse(tt.storage)) != 0 {
				t.Errorf("storage = %s, want %s", p.storage.String(), tt.storage)
			}
			if p.image != tt.image {
				t.Errorf("image = %s, want %s", p.image, tt.image)
			}
			i := slices.IndexFunc(p.params, func(e postgres.Effective) bool { return e.Name == "shared_buffers" })
			if i < 0 {
				t.Errorf("no shared_buffers among %d parameters, want %s", len(p.params), tt.sharedBuffers)
			} else if got := p.params[i].Value; got != tt.sharedBuffers {
				t.Errorf("shared_buffers = %s, want %s", got, tt.sharedBuffers)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	if msg := validate(newDB(func(d *v1alpha1.Database) { d.Spec.Image = "postgres:16.2" }), newPlan(newDB(func(d *v1alpha1.Database) { d.Spec.Image = "postgres:16.2" }))); !strings.Contains(msg, "spec.image") {
		t.Errorf("image of another major accepted: %q", msg)
	}
	noMem := newDB(func(d *v1alpha1.Database) {
		d.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	})
	if msg := validate(noMem, newPlan(noMem)); !strings.Contains(msg, "spec.resources") {
		t.Errorf("resources without memory accepted: %q", msg)
	}
	if msg := validate(newDB(), newPlan(newDB())); msg != "" {
		t.Errorf("valid spec refused: %s", msg)
	}
	// The small tier runs one instance: no replica can confirm a commit.
	syncSmall := newDB(func(d *v1alpha1.Database) {
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 1}}
	})
	if msg := validate(syncSmall, newPlan(syncSmall)); !strings.Contains(msg, "spec.replication.synchronous.number") {
		t.Errorf("synchronous replication on one instance accepted: %q", msg)
	}
	syncLarge := newDB(func(d *v1alpha1.Database) {
		d.Spec.Size = v1alpha1.SizeLarge
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 1,
			DataDurability: v1alpha1.DataDurabilityRequired}}
	})
	p := newPlan(syncLarge)
	if msg := validate(syncLarge, p); msg != "" {
		t.Errorf("synchronous replication on %d instances refused: %s", p.instances, msg)
	}
	if got := p.replicationConf(syncLarge); got != `{"instances":["orders-0","orders-1","orders-2"],"synchronous":1,"required":true}` {
		t.Errorf("replication file %s", got)
	}
	requestOnly := newDB(func(d *v1alpha1.Database) {
		d.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
	})
	if l := newPlan(requestOnly).resources.Limits; l.Memory().String() != "2Gi" {
		t.Errorf("a 2Gi request without a limit got limits %v", l)
	}
}

func TestStatefulSetShape(t *testing.T) {
	db := newDB(func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeMedium })
	sts := statefulSet(db, newPlan(db), stsInputs{instanceImage: "localhost/daytwo:dev", image: "postgres:15", major: "15",
		claimSize: ptr.To(resource.MustParse("20Gi"))})
	spec := sts.Spec
	if *spec.Replicas != 2 || *spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || *spec.ServiceName != "orders" {
		t.Fatalf("unexpected spec: replicas %d strategy %s service %s", *spec.Replicas, *spec.UpdateStrategy.Type, *spec.ServiceName)
	}
	if got := (*spec.VolumeClaimTemplates[0].Spec.Resources.Requests)[corev1.ResourceStorage]; got.String() != "20Gi" {
		t.Errorf("the live claim size must be kept, got %s", got.String())
	}
	pod := spec.Template.Spec
	// Placement: instances prefer distinct nodes and spread across zones.
	anti := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || *anti[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname {
		t.Errorf("anti-affinity %+v", anti)
	}
	if ts := pod.TopologySpreadConstraints; len(ts) != 1 || *ts[0].TopologyKey != corev1.LabelTopologyZone ||
		*ts[0].WhenUnsatisfiable != corev1.ScheduleAnyway || ts[0].LabelSelector.MatchLabels["daytwo.dev/database"] != "orders" {
		t.Errorf("topology spread %+v", ts)
	}
	if *pod.SecurityContext.RunAsUser != 999 || *pod.SecurityContext.FSGroup != 999 || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod security context not restricted: %+v", pod.SecurityContext)
	}
	if *pod.InitContainers[0].Image != "localhost/daytwo:dev" || *pod.Containers[0].Image != "postgres:15" {
		t.Errorf("images: init %s, postgres %s", *pod.InitContainers[0].Image, *pod.Containers[0].Image)
	}
	c := pod.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--cluster=orders", "--primary-host=orders-rw", "--lease=orders-primary", "--database=orders", "--owner=shop", "--pod=$(POD_NAME)"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	sc := c.SecurityContext
	if *sc.AllowPrivilegeEscalation || sc.Capabilities.Drop[0] != "ALL" || *sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context not restricted")
	}
	if *c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness is not gated on the instance manager")
	}
	if a := spec.Template.Annotations[annRestartParameters]; !strings.Contains(a, `"shared_buffers":"1GB"`) || strings.Contains(a, "work_mem") {
		t.Errorf("restart parameters annotation = %s", a)
	}
	// The shm volume is a quarter of the memory limit.
	shm := ""
	for _, v := range pod.Volumes {
		if *v.Name == "shm" {
			shm = v.EmptyDir.SizeLimit.String()
		}
	}
	if shm != "1Gi" {
		t.Errorf("shm size = %q, want 1Gi", shm)
	}
}

func TestServicesSelectRoles(t *testing.T) {
	db := newDB()
	if s := service(db, "orders", ""); *s.Spec.ClusterIP != corev1.ClusterIPNone || s.Spec.Selector[labelRole] != "" {
		t.Errorf("headless Service wrong: %+v", s.Spec)
	}
	if s := service(db, "orders-rw", "primary"); s.Spec.Selector[labelRole] != "primary" || s.Spec.Selector[labelDatabase] != "orders" {
		t.Errorf("-rw selector = %v", s.Spec.Selector)
	}
	if s := service(db, "orders-ro", "replica"); s.Spec.Selector[labelRole] != "replica" {
		t.Errorf("-ro selector = %v", s.Spec.Selector)
	}
}

func TestCredentialsData(t *testing.T) {
	if got := connectionURI("app", "p@ss:/?", "h.svc", "5432", "app"); got != "postgresql://app:p%40ss%3A%2F%3F@h.svc:5432/app?sslmode=verify-full" {
		t.Errorf("a password with URI delimiters: %s", got)
	}
	d := credentialsData(newDB(), "pw")
	if string(d["uri"]) != "postgresql://shop:pw@orders-rw.shop.svc:5432/orders?sslmode=verify-full" || string(d["username"]) != "shop" || string(d["dbname"]) != "orders" {
		t.Errorf("credentials = %q", d)
	}
}

// pickNow is the time TestPickRestartOrder picks at.
var pickNow = time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)

// pod is ready, or not, for an hour before pickNow.
func pod(name, rev string, ready bool) *corev1.Pod {
	return podSince(name, rev, ready, pickNow.Add(-time.Hour))
}

func podSince(name, rev string, ready bool, since time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}}}
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(since)}}
	return p
}

func TestStillRouted(t *testing.T) {
	promoted := metav1.NewTime(pickNow.Add(-time.Second))
	rec := func(from string, result v1alpha1.SwitchoverResult) *v1alpha1.SwitchoverRecord {
		return &v1alpha1.SwitchoverRecord{From: from, To: "db-1", Result: result, PromotedTime: &promoted}
	}
	tests := []struct {
		name string
		last *v1alpha1.SwitchoverRecord
		pod  string
		want time.Duration
	}{
		{"the old primary waits out the grace", rec("db-0", v1alpha1.SwitchoverSucceeded), "db-0", routeGrace - time.Second},
		{"another pod does not wait", rec("db-0", v1alpha1.SwitchoverSucceeded), "db-2", 0},
		{"no switchover", nil, "db-0", 0},
		{"a failed switchover moved nothing", rec("db-0", v1alpha1.SwitchoverFailed), "db-0", 0},
		{"long after", &v1alpha1.SwitchoverRecord{From: "db-0", Result: v1alpha1.SwitchoverSucceeded,
			PromotedTime: &metav1.Time{Time: pickNow.Add(-time.Minute)}}, "db-0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stillRouted(tt.last, tt.pod, pickNow); got != tt.want {
				t.Errorf("stillRouted = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPickRestartOrder(t *testing.T) {
	tests := []struct {
		name     string
		outdated []*corev1.Pod
		allReady bool
		want     string
	}{
		{"replicas before the primary, highest first", []*corev1.Pod{pod("db-0", "a", true), pod("db-1", "a", true), pod("db-2", "a", true)}, true, "db-2"},
		{"the primary last", []*corev1.Pod{pod("db-0", "a", true)}, true, "db-0"},
		{"a broken outdated pod goes at once", []*corev1.Pod{pod("db-0", "a", true), pod("db-1", "a", false)}, false, "db-1"},
		{"a pod briefly not ready waits its turn", []*corev1.Pod{pod("db-0", "a", true), podSince("db-1", "a", false, pickNow.Add(-2*time.Second)),
			pod("db-2", "a", true)}, false, ""},
		{"wait while another instance is not ready", []*corev1.Pod{pod("db-0", "a", true), pod("db-1", "a", true)}, false, ""},
		{"ordinal 10 sorts after 9", []*corev1.Pod{pod("db-9", "a", true), pod("db-10", "a", true)}, true, "db-10"},
		{"after a failover the primary is db-2, still last", []*corev1.Pod{pod("db-2", "a", true), pod("db-0", "a", true), pod("db-1", "a", true)}, true, "db-1"},
		{"the new primary last", []*corev1.Pod{pod("db-2", "a", true), pod("db-0", "a", true)}, true, "db-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			primary := "db-0"
			if strings.Contains(tt.name, "failover") || strings.Contains(tt.name, "new primary") {
				primary = "db-2"
			}
			if p := pickRestart(tt.outdated, tt.allReady, primary, pickNow); p != nil {
				got = p.Name
			}
			if got != tt.want {
				t.Errorf("picked %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFailing(t *testing.T) {
	r := &Reconciler{UpgradeDeadline: time.Minute}
	now := time.Now()
	mk := func(image, waiting string, age time.Duration) corev1.Pod {
		p := pod("db-1", "b", false)
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		p.Spec.Containers = []corev1.Container{{Name: containerPostgres, Image: image}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerPostgres, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		}
		return *p
	}
	for _, tt := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"pull error fails at once", mk("pg:new", "ErrImagePull", time.Second), "pod db-1 is ErrImagePull"},
		{"crash loop fails at once", mk("pg:new", "CrashLoopBackOff", time.Second), "pod db-1 is CrashLoopBackOff"},
		{"starting within the deadline", mk("pg:new", "", 30*time.Second), ""},
		{"past the deadline", mk("pg:new", "", 2*time.Minute), "pod db-1 was not ready within 1m0s"},
		{"a pod on the old image does not count", mk("pg:old", "ErrImagePull", time.Hour), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obs := &observation{now: now, templateImage: "pg:new", pods: []corev1.Pod{tt.pod}}
			if got := r.failing(obs); got != tt.want {
				t.Errorf("failing = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPendingParameters(t *testing.T) {
	db := newDB(func(d *v1alpha1.Database) {
		d.Spec.Parameters = map[string]string{"shared_buffers": "64MB", "work_mem": "8MB"}
	})
	p := newPlan(db)
	old := pod("db-0", "a", true)
	old.Annotations = map[string]string{annRestartParameters: newPlan(newDB()).restartParameters()}
	if got := pendingParameters(p, "", []*corev1.Pod{old}); strings.Join(got, ",") != "shared_buffers" {
		t.Errorf("pending = %v, want shared_buffers only (work_mem reloads)", got)
	}
	if got := pendingParameters(p, newPlan(newDB()).restartParameters(), nil); strings.Join(got, ",") != "shared_buffers" {
		t.Errorf("pending = %v, want shared_buffers only (work_mem reloads)", got)
	}
}

func TestPhase(t *testing.T) {
	ready := *pod("orders-0", "r", true)
	for _, tt := range []struct {
		name string
		obs  observation
		want v1alpha1.DatabasePhase
	}{
		{"first start", observation{primary: "orders-0", plan: plan{instances: 1}, pods: []corev1.Pod{*pod("orders-0", "r", false)}}, v1alpha1.DatabasePhaseCreating},
		{"ready", observation{primary: "orders-0", plan: plan{instances: 1}, pods: []corev1.Pod{ready}, in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1"}, v1alpha1.DatabasePhaseReady},
		{"rolling an image", observation{primary: "orders-0", plan: plan{instances: 1}, pods: []corev1.Pod{ready}, in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:2"}, v1alpha1.DatabasePhaseUpgrading},
		{"restart pending", observation{primary: "orders-0", plan: plan{instances: 1}, pods: []corev1.Pod{ready}, in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1", outdated: 1}, v1alpha1.DatabasePhaseUpgrading},
		{"a replica down", observation{primary: "orders-0", plan: plan{instances: 2}, pods: []corev1.Pod{ready}, in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1"}, v1alpha1.DatabasePhaseDegraded},
		{"rolled back", observation{primary: "orders-0", plan: plan{instances: 1}, pods: []corev1.Pod{ready}, in: stsInputs{goodImage: "pg:1"}, templateImage: "pg:1", rolledBack: "x"}, v1alpha1.DatabasePhaseDegraded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := newDB()
			setStatus(db, &tt.obs)
			if db.Status.Phase != tt.want {
				t.Errorf("phase = %s, want %s", db.Status.Phase, tt.want)
			}
		})
	}
}

func TestArchiveFailureSaysWhenTheVolumeFills(t *testing.T) {
	s := &instanceapi.ArchiveStatus{Failed: 3, LastError: "bucket wal: no such bucket", Pending: 5, PendingBytes: 80 << 20,
		VolumeFreeBytes: 2 << 30, TimeToFullSeconds: 5400}
	got := archiveFailure("ledger-0", "ledger-pitr", s)
	for _, want := range []string{"ledger-0", "ledger-pitr", "3 failures", "no such bucket", "5 files (80 MiB) wait in pg_wal",
		"2048 MiB free", "fills in about 1h30m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	s.TimeToFullSeconds = 0
	if got := archiveFailure("ledger-0", "ledger-pitr", s); strings.Contains(got, "fills") {
		t.Errorf("no growth, yet %q", got)
	}
}

func TestCertificateCurrent(t *testing.T) {
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"}}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	current := map[string]string{annNotAfter: now.Add(60 * 24 * time.Hour).Format(time.RFC3339), annNames: namesFingerprint(db), annCA: "ca"}
	with := func(k, v string) map[string]string {
		m := maps.Clone(current)
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"issued for these names, 60 days left", current, true},
		{"29 days left: renewed", with(annNotAfter, now.Add(29*24*time.Hour).Format(time.RFC3339)), false},
		{"expired", with(annNotAfter, now.Add(-time.Hour).Format(time.RFC3339)), false},
		{"issued for other names (a renamed Service)", with(annNames, "other"), false},
		{"no CA recorded", with(annCA, ""), false},
		{"no expiry recorded", with(annNotAfter, ""), false},
	} {
		if _, got := certificateCurrent(db, tc.ann, now); got != tc.want {
			t.Errorf("%s: current = %v, want %v", tc.name, got, tc.want)
		}
	}
	names := serverNames(db)
	for _, want := range []string{"orders-rw.shop.svc", "orders-ro.shop.svc.cluster.local", "*.orders.shop.svc", "orders-rw"} {
		if !slices.Contains(names, want) {
			t.Errorf("server names lack %s: %v", want, names)
		}
	}
}

// A restore from S3 storage with a private CA mounts the CA's Secret in
// the pod, optional (the pod starts once restored even without it); the
// template was built for claims alone and panicked on it.
func TestRestoreWithAPrivateS3CA(t *testing.T) {
	db := newDB(func(*v1alpha1.Database) {})
	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "shop", UID: "uid-b"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"}, Storage: v1alpha1.BackupStorage{
			S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "b", CASecretRef: &v1alpha1.SecretKeyRef{Name: "minio-ca"}}}}}
	storage, env, vols, mounts := series.Storage(b, instanceapi.RestorePrefix)
	sts := statefulSet(db, newPlan(db), stsInputs{instanceImage: "localhost/daytwo:dev", image: "postgres:15", major: "15",
		restore: &restoreSource{flags: instanceapi.RunFlags{Restore: storage}, env: env, volumes: vols, mounts: mounts}})
	found := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && *v.Secret.SecretName == "minio-ca" {
			found = *v.Secret.Optional && *v.Secret.Items[0].Path == "ca.crt"
		}
	}
	if !found {
		t.Errorf("the CA Secret is not an optional volume of the pod: %+v", sts.Spec.Template.Spec.Volumes)
	}
	// The restore checks what it restores with the series key.
	keyed := 0
	for _, c := range append(sts.Spec.Template.Spec.InitContainers, sts.Spec.Template.Spec.Containers...) {
		for _, e := range c.Env {
			if *e.Name == backup.SeriesKeyEnv && *e.ValueFrom.SecretKeyRef.Name == "nightly-series-key" {
				keyed++
			}
		}
	}
	if keyed != 1 {
		t.Errorf("%d containers get the series key, want the restore's alone", keyed)
	}
}
