package operator

import (
	"maps"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
)

// The informer cache holds one object per WebApp, Deployment and Service,
// and a decoder allocates every string of each apart: the namespace, each
// label and annotation key, the owner's kind and API version, each
// condition's type, status and reason. compact makes the cached objects
// share one copy of each such string, which repeats across thousands of
// objects, and drops what no controller reads from the cache.

// interner keeps one copy of each string it is given, of at most
// maxInternedLen bytes. Only kinds of strings that repeat across objects
// are given to it (never names or UIDs), but some of them can be one-offs
// too: a condition message that quotes a pod, an image tag. So the table is
// generational: once it holds maxInterned strings it starts again empty.
// Strings handed out before stay valid (the objects that hold them keep
// them); those still in use are shared again as the next objects bring
// them. (The standard library's unique package drops a value once no
// Handle to it is left, and cached objects hold plain strings, not Handles.)
type interner struct {
	mu sync.Mutex
	m  map[string]string
}

const (
	maxInterned    = 1 << 12
	maxInternedLen = 256
)

var shared = &interner{m: map[string]string{}}

func (in *interner) str(s string) string {
	if s == "" || len(s) > maxInternedLen {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) >= maxInterned {
		in.m = make(map[string]string, len(in.m))
	}
	s = strings.Clone(s)
	in.m[s] = s
	return s
}

func (in *interner) at(s *string) { *s = in.str(*s) }

// keys returns m with its keys shared (a new map: a key cannot be replaced
// in place), and nil for an empty map.
func (in *interner) keys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[in.str(k)] = v
	}
	return out
}

// compactMeta shares meta's repeated strings. An owner reference's name
// that is the object's own (a WebApp's children are named after it) shares
// the object's name.
func compactMeta(meta *metav1.ObjectMeta) {
	shared.at(&meta.Namespace)
	meta.Labels = shared.keys(meta.Labels)
	meta.Annotations = shared.keys(meta.Annotations)
	for i := range meta.OwnerReferences {
		o := &meta.OwnerReferences[i]
		shared.at(&o.APIVersion)
		shared.at(&o.Kind)
		o.Controller, o.BlockOwnerDeletion = sharedBool(o.Controller), sharedBool(o.BlockOwnerDeletion)
		if o.Name == meta.Name {
			o.Name = meta.Name
		}
	}
	if len(meta.ManagedFields) == 0 {
		meta.ManagedFields = nil // no backing array left behind by a filter
	}
	meta.Finalizers = sharedSlice(meta.Finalizers)
}

// yes and no are every cached owner reference's Controller and
// BlockOwnerDeletion: one allocation each, not two per object. Like the
// shared strings they rely on what controller-runtime promises: cached
// objects are read-only, Get and List hand out deep copies (never turn on
// UnsafeDisableDeepCopy), and event handlers do not write to the objects
// they are given.
var yes, no = true, false

func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &yes
	default:
		return &no
	}
}

func sharedSlice(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	for i := range s {
		shared.at(&s[i])
	}
	return s
}

// compactDeployment is slimDeployment's second half. A Deployment keeps
// no pod template: the template's annotations (its hash) and each
// container's image go among the Deployment's own annotations
// (controller.CachedTemplatePrefix, controller.CachedImagePrefix), one map
// instead of two. It also drops the labels (the cache selects daytwo's
// Deployments on the server, and no controller reads them from the cache)
// and the pod selector when it is the one daytwo gives every WebApp
// (webapp.SelectorOf puts it back).
func compactDeployment(d *appsv1.Deployment) {
	d.Labels = nil
	t := &d.Spec.Template
	// Into the decoded map, which compactMeta copies once with shared keys.
	if d.Annotations == nil {
		d.Annotations = make(map[string]string, len(t.Annotations)+len(t.Spec.Containers))
	}
	for k, v := range t.Annotations {
		d.Annotations[controller.CachedTemplatePrefix+k] = v
	}
	for _, c := range t.Spec.Containers {
		d.Annotations[controller.CachedImagePrefix+c.Name] = shared.str(c.Image)
	}
	d.Spec.Template = corev1.PodTemplateSpec{}
	// Nor does a controller read its strategy or limits from the cache:
	// they are applied, and compared by fingerprint.
	d.Spec.Strategy, d.Spec.RevisionHistoryLimit, d.Spec.ProgressDeadlineSeconds = appsv1.DeploymentStrategy{}, nil, nil
	if webapp.DefaultSelector(d) {
		d.Spec.Selector = nil
	}
	compactMeta(&d.ObjectMeta)
	for i := range d.Status.Conditions {
		c := &d.Status.Conditions[i]
		shared.at((*string)(&c.Type))
		shared.at((*string)(&c.Status))
		shared.at(&c.Reason)
	}
}

// compactService keeps a Service's metadata without its labels.
func compactService(s *corev1.Service) {
	s.Spec, s.Status = corev1.ServiceSpec{}, corev1.ServiceStatus{}
	s.Labels = nil
	compactMeta(&s.ObjectMeta)
}

// compactWebApp shares a WebApp's repeated strings: those of its spec that
// name images and policies, and its conditions' type, status, reason and
// message (messages such as "1 of 1 replicas available" repeat too).
func compactWebApp(w *v1alpha1.WebApp) {
	compactMeta(&w.ObjectMeta)
	shared.at(&w.Spec.Image)
	shared.at((*string)(&w.Spec.ImagePullPolicy))
	shared.at((*string)(&w.Spec.DeletionPolicy))
	shared.at(&w.Status.CurrentImage)
	if w.Status.URL == w.Status.ServiceURL {
		w.Status.URL = w.Status.ServiceURL
	}
	// A decoder grows a list by doubling: three conditions sit in room for four.
	if cap(w.Status.Conditions) > len(w.Status.Conditions) {
		w.Status.Conditions = slices.Clone(w.Status.Conditions)
	}
	for i := range w.Status.Conditions {
		c := &w.Status.Conditions[i]
		shared.at(&c.Type)
		shared.at((*string)(&c.Status))
		shared.at(&c.Reason)
		shared.at(&c.Message)
	}
}

// dropCacheAnnotations removes, from an object the watch delivered, every
// annotation only the cache may set: one the server holds (a user's) must
// not pass for the cache's.
func dropCacheAnnotations(m map[string]string) {
	maps.DeleteFunc(m, func(k, _ string) bool { return strings.HasPrefix(k, controller.CachePrefix) })
}
