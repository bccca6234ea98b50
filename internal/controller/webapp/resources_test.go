package webapp

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

func testApp(mutate func(*v1alpha1.WebApp)) *v1alpha1.WebApp {
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop", UID: "uid-1", Generation: 3},
		Spec:       v1alpha1.WebAppSpec{Image: "shop:1", Port: 8080},
	}
	if mutate != nil {
		mutate(app)
	}
	return app
}

func TestDeploymentBuilder(t *testing.T) {
	in := podInputs{selector: selectorLabels(testApp(nil)), configHash: "abc"}
	tests := []struct {
		name      string
		app       *v1alpha1.WebApp
		replicas  *int32
		surge     string
		unavail   string
		deadline  int32
		failedAnn string
	}{
		{name: "defaults", app: testApp(nil), replicas: ptr.To[int32](1), surge: "25%", unavail: "0", deadline: 600},
		{name: "fixed replicas and rollout", app: testApp(func(a *v1alpha1.WebApp) {
			a.Spec.Replicas = ptr.To[int32](4)
			a.Spec.Rollout = &v1alpha1.WebAppRollout{MaxSurge: ptr.To(intstr.FromInt32(2)), MaxUnavailable: ptr.To(intstr.FromString("50%")), ProgressDeadlineSeconds: 30}
		}), replicas: ptr.To[int32](4), surge: "2", unavail: "50%", deadline: 30},
		{name: "autoscaling leaves replicas out", app: testApp(func(a *v1alpha1.WebApp) {
			a.Spec.Autoscaling = &v1alpha1.WebAppAutoscaling{MinReplicas: 2, MaxReplicas: 5}
		}), replicas: nil, surge: "25%", unavail: "0", deadline: 600},
		{name: "failed revision recorded", app: testApp(nil), replicas: ptr.To[int32](1), surge: "25%", unavail: "0", deadline: 600, failedAnn: "f00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deployment(tt.app, in.selector, podTemplate(tt.app, in), failure{revision: tt.failedAnn}, false)
			s := d.Spec
			if (tt.replicas == nil) != (s.Replicas == nil) || (tt.replicas != nil && *tt.replicas != *s.Replicas) {
				t.Errorf("replicas = %v, want %v", s.Replicas, tt.replicas)
			}
			ru := s.Strategy.RollingUpdate
			if ru.MaxSurge.String() != tt.surge || ru.MaxUnavailable.String() != tt.unavail || *s.ProgressDeadlineSeconds != tt.deadline {
				t.Errorf("strategy surge=%s unavailable=%s deadline=%d", ru.MaxSurge.String(), ru.MaxUnavailable.String(), *s.ProgressDeadlineSeconds)
			}
			if got := d.Annotations[annotationFailedTemplate]; got != tt.failedAnn {
				t.Errorf("failed annotation = %q, want %q", got, tt.failedAnn)
			}
			if r := d.OwnerReferences[0]; *r.UID != "uid-1" || !*r.Controller || *r.Kind != "WebApp" {
				t.Errorf("owner reference = %+v", r)
			}
			if s.Selector.MatchLabels[labelWebApp] != "shop" || len(s.Selector.MatchLabels) != 1 {
				t.Errorf("selector = %v", s.Selector.MatchLabels)
			}
		})
	}
}

func TestPodTemplateHashFollowsContent(t *testing.T) {
	base := testApp(nil)
	in := podInputs{selector: selectorLabels(base), configHash: "abc"}
	h := func(app *v1alpha1.WebApp, in podInputs) string {
		return podTemplate(app, in).Annotations[annotationTemplateHash]
	}
	if h(base, in) != h(testApp(nil), in) {
		t.Error("the same spec hashed differently")
	}
	if h(base, in) == h(testApp(func(a *v1alpha1.WebApp) { a.Spec.Image = "shop:2" }), in) {
		t.Error("a new image kept the template hash")
	}
	other := in
	other.configHash = "def"
	if h(base, in) == h(base, other) {
		t.Error("new config kept the template hash")
	}
	// Replicas are not part of the pod template: scaling is not a rollout.
	if h(base, in) != h(testApp(func(a *v1alpha1.WebApp) { a.Spec.Replicas = ptr.To[int32](9) }), in) {
		t.Error("scaling changed the template hash")
	}
}

func TestContainerDefaultsAndOverrides(t *testing.T) {
	custom := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	app := testApp(func(a *v1alpha1.WebApp) {
		a.Spec.Probes = &v1alpha1.WebAppProbes{Readiness: custom}
		a.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
	})
	c := container(app, podInputs{databaseSecret: "db-credentials"})
	if c.ReadinessProbe.Exec == nil || c.LivenessProbe.TCPSocket == nil {
		t.Errorf("readiness %+v liveness %+v: want the custom readiness and the default liveness", c.ReadinessProbe, c.LivenessProbe)
	}
	names := []string{}
	for _, e := range c.Env {
		names = append(names, *e.Name)
	}
	want := []string{"PORT", "A", "DATABASE_URL", "PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSSLMODE", "PGSSLROOTCERT"}
	if len(names) != len(want) {
		t.Fatalf("env = %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Errorf("env[%d] = %s, want %s", i, names[i], want[i])
		}
	}
	if *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.Capabilities.Drop[0] != "ALL" {
		t.Errorf("security context = %+v", c.SecurityContext)
	}
	// Every container is bounded: by default, and when only a memory request is given.
	if l := *c.Resources.Limits; l.Memory().IsZero() || l.Cpu().IsZero() {
		t.Errorf("default limits = %v", l)
	}
	own := testApp(func(a *v1alpha1.WebApp) {
		a.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}}
	})
	if l := *container(own, podInputs{}).Resources.Limits; l.Memory().String() != "300Mi" {
		t.Errorf("a 300Mi request without a limit got limits %v", l)
	}
}

func TestOptionalChildren(t *testing.T) {
	sel := map[string]string{labelWebApp: "shop"}
	tests := []struct {
		name                          string
		app                           *v1alpha1.WebApp
		wantHPA, wantPDB, wantIngress bool
	}{
		{"one replica", testApp(nil), false, false, false},
		{"three replicas", testApp(func(a *v1alpha1.WebApp) { a.Spec.Replicas = ptr.To[int32](3) }), false, true, false},
		{"autoscaling 1..1", testApp(func(a *v1alpha1.WebApp) {
			a.Spec.Autoscaling = &v1alpha1.WebAppAutoscaling{MinReplicas: 1, MaxReplicas: 1}
		}), true, false, false},
		{"autoscaling 1..4", testApp(func(a *v1alpha1.WebApp) {
			a.Spec.Autoscaling = &v1alpha1.WebAppAutoscaling{MinReplicas: 1, MaxReplicas: 4}
		}), true, true, false},
		{"ingress", testApp(func(a *v1alpha1.WebApp) { a.Spec.Ingress = &v1alpha1.WebAppIngress{Host: "a.example.com"} }), false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hpa(tt.app) != nil; got != tt.wantHPA {
				t.Errorf("hpa = %v, want %v", got, tt.wantHPA)
			}
			if got := pdb(tt.app, sel) != nil; got != tt.wantPDB {
				t.Errorf("pdb = %v, want %v", got, tt.wantPDB)
			}
			if got := ingress(tt.app) != nil; got != tt.wantIngress {
				t.Errorf("ingress = %v, want %v", got, tt.wantIngress)
			}
		})
	}
}

func TestConfigReferences(t *testing.T) {
	app := testApp(func(a *v1alpha1.WebApp) {
		a.Spec.ConfigRefs = []v1alpha1.ConfigRef{{Kind: v1alpha1.ConfigRefSecret, Name: "b"}, {Kind: v1alpha1.ConfigRefConfigMap, Name: "a"}}
		a.Spec.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "b"}, Key: "k", Optional: ptr.To(true)}}}}
		a.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Optional: ptr.To(true)}}}
		a.Spec.DatabaseRef = &v1alpha1.WebAppDatabaseRef{Name: "db"}
	})
	refs := configReferences(app)
	want := []reference{{Kind: "ConfigMap", Name: "a"}, {Kind: "ConfigMap", Name: "c", Optional: true}, {Kind: "Secret", Name: "b"}}
	if len(refs) != len(want) {
		t.Fatalf("refs = %+v, want %+v", refs, want)
	}
	for i := range want {
		if refs[i] != want[i] {
			t.Errorf("refs[%d] = %+v, want %+v (required wins over optional)", i, refs[i], want[i])
		}
	}
	keys := indexKeys(app)
	if len(keys) != 5 || keys[3] != "Database/db" || keys[4] != "Secret/db-credentials" {
		t.Errorf("index keys = %v", keys)
	}
}

func TestSetStatus(t *testing.T) {
	dep := func(replicas, updated, available int32, observed bool) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: containerName, Image: "shop:1"}}
		d.Status = appsv1.DeploymentStatus{Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}
		if observed {
			d.Status.ObservedGeneration = 2
		}
		return d
	}
	tests := []struct {
		name                                string
		obs                                 observation
		ready, progressing, degraded, image string
	}{
		{"missing reference", observation{missing: "Waiting for Secret x to exist"}, v1alpha1.ReasonMissingReference, "", "", ""},
		{"conflict", observation{conflict: "Deployment shop exists"}, v1alpha1.ReasonConflictingResource, "", "", ""},
		{"rolling out", observation{rollout: rollout{deployment: dep(3, 1, 2, true), desiredImage: "shop:2"}}, v1alpha1.ReasonAvailable, v1alpha1.ReasonRollingOut, v1alpha1.ReasonAvailable, ""},
		{"complete", observation{rollout: rollout{deployment: dep(2, 2, 2, true), desiredImage: "shop:1"}}, v1alpha1.ReasonAvailable, v1alpha1.ReasonRolloutComplete, v1alpha1.ReasonAvailable, "shop:1"},
		{"not observed yet", observation{rollout: rollout{deployment: dep(2, 2, 2, false), desiredImage: "shop:1"}}, v1alpha1.ReasonAvailable, v1alpha1.ReasonRollingOut, v1alpha1.ReasonAvailable, ""},
		{"rolled back", observation{rollout: rollout{deployment: dep(2, 2, 2, true), desiredImage: "shop:bad", failedHash: "f00"}}, v1alpha1.ReasonAvailable, v1alpha1.ReasonRolledBack, v1alpha1.ReasonRolledBack, "shop:1"},
		{"deadline, nothing to roll back to", observation{rollout: rollout{deployment: dep(2, 2, 0, true), desiredImage: "shop:bad", deadlineExceeded: true}}, v1alpha1.ReasonReconciling, v1alpha1.ReasonProgressDeadlineExceeded, v1alpha1.ReasonProgressDeadlineExceeded, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := testApp(nil)
			setStatus(app, tt.obs)
			for typ, want := range map[string]string{v1alpha1.ConditionReady: tt.ready, v1alpha1.ConditionProgressing: tt.progressing, v1alpha1.ConditionDegraded: tt.degraded} {
				got := ""
				for _, c := range app.Status.Conditions {
					if c.Type == typ {
						got = c.Reason
						if c.ObservedGeneration != 3 {
							t.Errorf("%s observedGeneration = %d, want 3", typ, c.ObservedGeneration)
						}
					}
				}
				if got != want {
					t.Errorf("%s reason = %q, want %q", typ, got, want)
				}
			}
			if app.Status.CurrentImage != tt.image {
				t.Errorf("currentImage = %q, want %q", app.Status.CurrentImage, tt.image)
			}
			if app.Status.ObservedGeneration != 3 || app.Status.Selector != "daytwo.dev/track notin (canary),daytwo.dev/webapp=shop" {
				t.Errorf("observedGeneration=%d selector=%q", app.Status.ObservedGeneration, app.Status.Selector)
			}
		})
	}
}

func TestCacheBehind(t *testing.T) {
	key := client.ObjectKey{Namespace: "shop", Name: "web"}
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	dep := func(uid string, rv string, gen int64) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv, Generation: gen}}
	}
	// What an apply configuration holds after an apply: the server's answer.
	answer := func(d *appsv1.Deployment) *appsv1ac.DeploymentApplyConfiguration {
		return appsv1ac.Deployment("web", "shop").WithUID(d.UID).WithResourceVersion(d.ResourceVersion).WithGeneration(d.Generation)
	}
	applied := dep("a", "120", 3)
	for _, c := range []struct {
		name     string
		applied  *appsv1.Deployment // nil: nothing applied
		live     *appsv1.Deployment // nil: not in the cache
		after    time.Duration
		behind   bool
		recorded bool // the record is still there after the check
	}{
		{name: "nothing applied", live: dep("a", "100", 3)},
		{name: "created, not in the cache yet", applied: applied, after: time.Second, behind: true, recorded: true},
		{name: "an older version in the cache", applied: applied, live: dep("a", "110", 2), after: time.Second, behind: true, recorded: true},
		{name: "a metadata-only write not in the cache", applied: applied, live: dep("a", "110", 3), after: time.Second, behind: true, recorded: true},
		{name: "the cache caught up", applied: applied, live: dep("a", "120", 3), after: time.Second},
		{name: "the cache is ahead (a status write)", applied: applied, live: dep("a", "125", 3), after: time.Second},
		{name: "another object by that name", applied: applied, live: dep("b", "90", 1), after: time.Second},
		{name: "versions that do not compare: by generation", applied: dep("a", "x", 3), live: dep("a", "y", 3), after: time.Second},
		{name: "deleted after the apply: given up", applied: applied, after: cacheBehindFor + time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Reconciler{}
			if r.recordApplied(key, appsv1ac.Deployment("web", "shop"), at) {
				t.Fatal("recorded an apply configuration that holds no answer")
			}
			if c.applied != nil && !r.recordApplied(key, answer(c.applied), at) {
				t.Fatal("did not record an answer")
			}
			live, exists := c.live, c.live != nil
			if live == nil {
				live = &appsv1.Deployment{}
			}
			if got := r.cacheBehind(key, live, exists, at.Add(c.after)); got != c.behind {
				t.Errorf("cacheBehind = %v, want %v", got, c.behind)
			}
			if _, ok := r.applied.Load(key); ok != c.recorded {
				t.Errorf("record kept = %v, want %v", ok, c.recorded)
			}
		})
	}
}

func TestPDBLeavesTheCanaryOut(t *testing.T) {
	sel := map[string]string{"daytwo.dev/webapp": "shop"}
	ac := pdb(testApp(func(a *v1alpha1.WebApp) { a.Spec.Replicas = ptr.To[int32](3) }), sel)
	p := controller.ApplyConfig[policyv1.PodDisruptionBudget](ac)
	s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Matches(k8slabels.Set(sel)) {
		t.Errorf("PDB selector %s does not select the stable pods", s)
	}
	if s.Matches(k8slabels.Set{"daytwo.dev/webapp": "shop", labelTrack: trackCanary}) {
		t.Errorf("PDB selector %s selects the canary's pods", s)
	}
	if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("unhealthyPodEvictionPolicy = %v, want AlwaysAllow", p.Spec.UnhealthyPodEvictionPolicy)
	}
}
