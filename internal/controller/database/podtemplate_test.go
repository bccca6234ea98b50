package database

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

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
	// No spec.ha: no term flag, so a Database made before spec.ha keeps
	// its template (and its pods) through an operator upgrade.
	if strings.Contains(args, "--lease-duration") {
		t.Errorf("args %q carry a lease term without spec.ha", args)
	}
	db.Spec.HA = &v1alpha1.DatabaseHA{LeaseDurationSeconds: ptr.To[int32](15)}
	withTerm := statefulSet(db, newPlan(db), stsInputs{instanceImage: "localhost/daytwo:dev", image: "postgres:15", major: "15"})
	if args := strings.Join(withTerm.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--lease-duration=15s") {
		t.Errorf("args %q lack spec.ha's term", args)
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
