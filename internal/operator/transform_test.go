package operator

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
)

// A Deployment slimmed in place and given to the transform again keeps its
// fingerprint (the cache's own copy, a *cachedDeployment, comes back with
// a watch-list's Replace, and is kept as it is: TestCacheStoresChildrenSlim),
// and a fingerprint the server holds must not pass for daytwo's, even on an
// object whose managed fields were stripped.
func TestTransformIsIdempotentAndTrustsOnlyItself(t *testing.T) {
	served := servedDeployment
	want := controller.Fingerprint(appsv1ac.Deployment("web", "ns").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(3)))

	d := served(nil)
	for range 2 {
		if _, err := transform(d); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := strings.Cut(d.Annotations[controller.CachedOwnedFingerprint], "/"); got != want {
			t.Fatalf("fingerprint %q, want %q", got, want)
		}
	}
	if len(d.ManagedFields) != 0 || len(d.Spec.Template.Spec.Containers) != 0 || d.Spec.Template.Labels != nil ||
		d.Spec.Template.Annotations != nil || d.Status.Conditions[0].Message != "" {
		t.Fatalf("the cached Deployment kept more than it should: %+v", d)
	}
	if d.Annotations[controller.CachedImagePrefix+"app"] != "shop:1" || d.Annotations[controller.CachedTemplatePrefix+"daytwo.dev/template-hash"] != "abc" ||
		d.Status.Conditions[0].Reason != "NewReplicaSetAvailable" || *d.Spec.Replicas != 3 {
		t.Fatalf("the cached Deployment lost what the WebApp controller reads: %+v", d)
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ManagedFields: []metav1.ManagedFieldsEntry{{
		Manager: controller.FieldOwner, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:selector":{}}}`)}}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.0.0.1", Type: corev1.ServiceTypeClusterIP}}
	if _, err := transform(svc); err != nil {
		t.Fatal(err)
	}
	if svc.Annotations[controller.CachedOwnedFingerprint] == "" || svc.Spec.ClusterIP != "" || svc.Spec.Selector != nil {
		t.Fatalf("the cached Service is not its metadata and fingerprint: %+v", svc)
	}

	forged := served(map[string]string{controller.CachedOwnedFingerprint: want})
	forged.ManagedFields[0].Manager = "someone"
	forged.Annotations[controller.CachedImagePrefix+"sidecar"] = "forged:1"
	if _, err := transform(forged); err != nil {
		t.Fatal(err)
	}
	if _, ok := forged.Annotations[controller.CachedOwnedFingerprint]; ok {
		t.Fatal("a fingerprint annotation from the server survived the transform")
	}
	if _, ok := forged.Annotations[controller.CachedImagePrefix+"sidecar"]; ok {
		t.Fatal("an image annotation from the server survived the transform")
	}

	// A user can strip an object's managed fields; its annotations are
	// still the server's, not the cache's.
	stripped := served(map[string]string{controller.CachedOwnedFingerprint: want})
	stripped.ManagedFields = nil
	if _, err := transform(stripped); err != nil {
		t.Fatal(err)
	}
	if _, ok := stripped.Annotations[controller.CachedOwnedFingerprint]; ok {
		t.Fatal("a fingerprint annotation from the server survived on an object without managed fields")
	}
}

// The string table starts again once full: strings handed out before stay
// as they were, and those that repeat are shared again.
func TestInternerStartsAgainWhenFull(t *testing.T) {
	in := &interner{m: map[string]string{}}
	first := in.str(strings.Clone("shop"))
	for i := range maxInterned {
		in.str(fmt.Sprintf("one-off %d", i))
	}
	if len(in.m) > maxInterned {
		t.Fatalf("the table holds %d strings, bound %d", len(in.m), maxInterned)
	}
	// A string first seen after the table filled is shared all the same.
	again, once := in.str(strings.Clone("newcomer")), in.str(strings.Clone("newcomer"))
	if first != "shop" || unsafe.StringData(again) != unsafe.StringData(once) {
		t.Fatalf("once the table filled, %q is not shared", again)
	}
	if long := strings.Repeat("x", maxInternedLen+1); unsafe.StringData(in.str(long)) != unsafe.StringData(long) {
		t.Fatal("a string over the length bound went into the table")
	}
}

// The cache keeps one copy of the strings thousands of children repeat,
// and drops what the controllers do not read from it; what they read stays.
func TestTransformCompactsWhatRepeats(t *testing.T) {
	owner := func(name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "daytwo.dev/v1alpha1", Kind: "WebApp", Name: strings.Clone(name), UID: "u-" + types.UID(name), Controller: new(true)}}
	}
	dep := func(name string, sel map[string]string) *appsv1.Deployment {
		// Every string built apart, as a decoder would.
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: strings.Clone("shop"), OwnerReferences: owner(name),
				Labels:        map[string]string{strings.Clone("app.kubernetes.io/managed-by"): "daytwo"},
				Annotations:   map[string]string{strings.Clone("deployment.kubernetes.io/revision"): "1"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: strings.Clone("shop:1")}}}}},
			Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable,
				Status: corev1.ConditionTrue, Reason: strings.Clone("MinimumReplicasAvailable")}}},
		}
	}
	a, b := dep("a", map[string]string{"daytwo.dev/webapp": "a"}), dep("b", map[string]string{"daytwo.dev/webapp": "other"})
	for _, d := range []*appsv1.Deployment{a, b} {
		if _, err := transform(d); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q are not one shared string", what, x, y)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("owner kind", a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind)
	same("owner name and object name", a.OwnerReferences[0].Name, a.Name)
	same("condition reason", a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason)
	same("image", a.Annotations[controller.CachedImagePrefix+"app"], b.Annotations[controller.CachedImagePrefix+"app"])
	for k := range a.Annotations {
		for l := range b.Annotations {
			if k == l {
				same("annotation key", k, l)
			}
		}
	}
	if !*a.OwnerReferences[0].Controller || a.OwnerReferences[0].Controller != b.OwnerReferences[0].Controller {
		t.Errorf("owner references' Controller: %v and %v, want one shared true", a.OwnerReferences[0].Controller, b.OwnerReferences[0].Controller)
	}
	if a.Labels != nil || a.ManagedFields != nil || a.Annotations["deployment.kubernetes.io/revision"] != "1" {
		t.Errorf("cached metadata: labels %v, managed fields %v, annotations %v", a.Labels, a.ManagedFields, a.Annotations)
	}
	// The selector daytwo gives every WebApp goes, and comes back; any other stays.
	if a.Spec.Selector != nil || b.Spec.Selector == nil {
		t.Fatalf("selectors after the transform: %v and %v, want nil and kept", a.Spec.Selector, b.Spec.Selector)
	}
	if got := webapp.SelectorOf(a); !maps.Equal(got, map[string]string{"daytwo.dev/webapp": "a"}) {
		t.Errorf("SelectorOf the cached Deployment = %v", got)
	}
	if got := webapp.SelectorOf(b); !maps.Equal(got, map[string]string{"daytwo.dev/webapp": "other"}) {
		t.Errorf("SelectorOf a Deployment with its own selector = %v", got)
	}
	// A canary's selector (two labels), one with expressions, and one whose
	// WebApp owner is not its controller all stay.
	for name, d := range map[string]*appsv1.Deployment{
		"canary":      dep("c", map[string]string{"daytwo.dev/webapp": "c", "daytwo.dev/track": "canary"}),
		"expressions": dep("e", map[string]string{"daytwo.dev/webapp": "e"}),
		"no control":  dep("n", map[string]string{"daytwo.dev/webapp": "n"}),
	} {
		switch name {
		case "expressions":
			d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}
		case "no control":
			d.OwnerReferences[0].Controller = nil
		}
		if _, err := transform(d); err != nil {
			t.Fatal(err)
		}
		if d.Spec.Selector == nil {
			t.Errorf("%s: the cache dropped a selector daytwo did not give", name)
		}
	}

	app := &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "shop", ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}, {Manager: controller.FieldOwner, Subresource: "status"}}},
		Status: v1alpha1.WebAppStatus{URL: "http://a.shop.svc:80", ServiceURL: strings.Clone("http://a.shop.svc:80"),
			Conditions: append(make([]metav1.Condition, 0, 4), metav1.Condition{Type: "Ready", Message: "1 of 1 replicas available"})}}
	if _, err := transform(app); err != nil {
		t.Fatal(err)
	}
	if app.ManagedFields != nil || cap(app.Status.Conditions) != 1 || app.Status.Conditions[0].Message != "1 of 1 replicas available" {
		t.Errorf("cached WebApp: managed fields %v, conditions %d of room %d", app.ManagedFields, len(app.Status.Conditions), cap(app.Status.Conditions))
	}
	same("url and serviceURL", app.Status.URL, app.Status.ServiceURL)
}

// servedDeployment is a Deployment as the API server sends it, daytwo's
// apply owning its replicas.
func servedDeployment(annotations map[string]string) *appsv1.Deployment {
	fields := `{"f:spec":{"f:replicas":{}}}`
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Annotations: annotations,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: controller.FieldOwner, Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}}},
		Spec: appsv1.DeploymentSpec{Replicas: new(int32(3)), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"daytwo.dev/template-hash": "abc"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "shop:1", Args: []string{"--big"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}},
		Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
			Reason: "NewReplicaSetAvailable", Message: `ReplicaSet "web-5d9f" has successfully progressed.`}}},
	}
}

// A status update, or a label or annotation daytwo does not own (the
// controller manager's revision), keeps the cached copy's fingerprint,
// without extracting daytwo's part again; anything daytwo's part is read
// from (the spec; its labels and annotations, owner references and
// finalizers; which fields daytwo owns; the object) takes a new one.
func TestDeploymentFingerprintIsKeptAcrossStatusUpdates(t *testing.T) {
	first := servedDeployment(nil)
	first.UID, first.Generation = "uid-1", 1
	src := ownedSource(first)
	if src == "" {
		t.Fatal("no digest of daytwo's part")
	}
	// The cache's copy, as a sentinel: only a kept fingerprint reads it.
	cached := servedDeployment(map[string]string{controller.CachedOwnedFingerprint: "sentinel/" + src})
	cached.UID, cached.Generation = first.UID, first.Generation

	status := servedDeployment(nil)
	status.UID, status.Generation = first.UID, first.Generation
	status.Status.ReadyReplicas = 3
	status.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	status.Labels = map[string]string{"team": "a"}
	transformDeployment(status, cached)
	if got := status.Annotations[controller.CachedOwnedFingerprint]; got != "sentinel/"+src {
		t.Fatalf("a status update and metadata daytwo does not own took fingerprint %q, want the cached copy's", got)
	}
	if len(status.ManagedFields) != 0 {
		t.Fatal("the managed fields stayed on a kept fingerprint")
	}
	if !strings.HasPrefix(cached.Annotations[controller.CachedOwnedFingerprint], "sentinel/") {
		t.Fatal("the cached copy changed")
	}

	// daytwo's entry names a label and an annotation from here on.
	ownsMetadata := func(d *appsv1.Deployment) {
		d.Labels, d.Annotations = map[string]string{"team": "a"}, map[string]string{"note": "x"}
		d.ManagedFields[0].FieldsV1 = metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:note":{}},"f:labels":{"f:team":{}}},"f:spec":{"f:replicas":{}}}`)
	}
	ownsMetadata(first)
	src = ownedSource(first)
	cached = servedDeployment(map[string]string{controller.CachedOwnedFingerprint: "sentinel/" + src})
	cached.UID, cached.Generation = first.UID, first.Generation
	for name, change := range map[string]func(d *appsv1.Deployment){
		"the spec": func(d *appsv1.Deployment) { d.Generation = 2; d.Spec.Replicas = new(int32(4)) },
		"a quantity's format only (the API server keeps the generation)": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1073741824")}
		},
		"a label daytwo owns":       func(d *appsv1.Deployment) { d.Labels["team"] = "b" },
		"an annotation daytwo owns": func(d *appsv1.Deployment) { d.Annotations["note"] = "y" },
		"an owner": func(d *appsv1.Deployment) {
			d.OwnerReferences = []metav1.OwnerReference{{Kind: "WebApp", Name: "web", UID: "o"}}
		},
		"a finalizer": func(d *appsv1.Deployment) { d.Finalizers = []string{"x"} },
		"daytwo's fields": func(d *appsv1.Deployment) {
			d.ManagedFields[0].FieldsV1 = metav1.NewFieldsV1(`{"f:spec":{"f:paused":{}}}`)
		},
		"the object (made again)": func(d *appsv1.Deployment) { d.UID = "uid-2" },
	} {
		d := servedDeployment(nil)
		d.UID, d.Generation = first.UID, first.Generation
		ownsMetadata(d)
		if ownedSource(d) != src {
			t.Fatalf("%s: the unchanged copy has another digest", name)
		}
		change(d)
		transformDeployment(d, cached)
		if got := d.Annotations[controller.CachedOwnedFingerprint]; strings.HasPrefix(got, "sentinel/") || got == "" {
			t.Errorf("a change of %s kept fingerprint %q", name, got)
		}
	}

	// The fingerprint part is what a reconcile compares.
	first = servedDeployment(nil)
	if !controller.Unchanged(first, appsv1ac.Deployment("web", "ns").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(3)), appsv1ac.ExtractDeployment) {
		t.Fatal("the served Deployment does not hold what daytwo applies")
	}
	transformDeployment(first, nil)
	if !controller.Unchanged(first, appsv1ac.Deployment("web", "ns").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(3)), appsv1ac.ExtractDeployment) {
		t.Fatalf("the cached copy (%s) does not hold what daytwo applies", first.Annotations[controller.CachedOwnedFingerprint])
	}
}

// The cache stores a Deployment and a Service as structs of only what the
// transform leaves of them, and reads them back whole: nothing a
// controller reads is lost, and each struct is a fraction of the kind's.
func TestCacheStoresChildrenSlim(t *testing.T) {
	d := servedDeployment(map[string]string{"deployment.kubernetes.io/revision": "2"})
	d.UID, d.Generation = "uid-1", 4
	d.Spec.Paused, d.Spec.MinReadySeconds = true, 5
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 4, Replicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 3,
		Conditions: d.Status.Conditions}
	out, err := transform(d)
	if err != nil {
		t.Fatal(err)
	}
	slim, ok := out.(*cachedDeployment)
	if !ok {
		t.Fatalf("the cache stores a Deployment as %T", out)
	}
	// transform left d as the cache's copy used to be: that is what a read gives.
	if got := expand(slim); !reflect.DeepEqual(got, d) {
		t.Fatalf("a read of the cached Deployment gives\n%+v\nwant\n%+v", got, d)
	}
	if again, _ := transform(slim); again != slim {
		t.Fatal("the transform changed the cache's own copy")
	}
	cp := slim.DeepCopyObject().(*cachedDeployment)
	if !reflect.DeepEqual(cp, slim) {
		t.Fatalf("a deep copy of the cached Deployment differs: %+v", cp)
	}
	cp.Annotations["x"], cp.status.Conditions[0].Reason = "y", "changed"
	if _, ok := slim.Annotations["x"]; ok || slim.status.Conditions[0].Reason == "changed" {
		t.Fatal("a deep copy of the cached Deployment shares its maps or slices")
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Annotations: map[string]string{"a": "b"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1"}}
	out, err = transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	if got := expand(out); !reflect.DeepEqual(got, &corev1.Service{ObjectMeta: svc.ObjectMeta}) {
		t.Fatalf("a read of the cached Service gives %+v", got)
	}
	// Allocation size classes: 352 and 240 bytes, against 1,280 and 640.
	if d, s := unsafe.Sizeof(cachedDeployment{}), unsafe.Sizeof(cachedService{}); d > 352 || s > 240 {
		t.Fatalf("the slim structs grew: Deployment %d bytes, Service %d", d, s)
	}
}
