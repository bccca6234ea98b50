package operator

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

// The informer cache holds one Deployment and one Service per WebApp. Of
// an appsv1.Deployment the transform keeps only metadata, four spec fields
// and the status, yet the struct alone is 1,208 bytes (1,280 allocated);
// a corev1.Service keeps only metadata, in 640. So the cache stores each
// as a struct of only what it keeps (cachedDeployment, 352 bytes;
// cachedService, 240), and hands out the full type on every read: a
// slimInformer's indexer expands what it holds, and controller-runtime's
// cache reader copies the expansion as it copies any cached object. Event
// handlers see the slim struct: they read metadata only (owner
// references, labels), which it has.

// cachedDeployment is the cache's copy of a Deployment: what
// transformDeployment leaves of one.
type cachedDeployment struct {
	metav1.ObjectMeta
	replicas        *int32
	selector        *metav1.LabelSelector
	minReadySeconds int32
	paused          bool
	status          appsv1.DeploymentStatus
}

// slimDeploymentOf is d, which transformDeployment has slimmed, as the
// cache stores it. It takes d's fields, not copies.
func slimDeploymentOf(d *appsv1.Deployment) *cachedDeployment {
	return &cachedDeployment{ObjectMeta: d.ObjectMeta, replicas: d.Spec.Replicas, selector: d.Spec.Selector,
		minReadySeconds: d.Spec.MinReadySeconds, paused: d.Spec.Paused, status: d.Status}
}

// deployment is c as the Deployment it stands for. It shares c's maps and
// slices: a reader copies it before handing it out.
func (c *cachedDeployment) deployment() *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: c.ObjectMeta, Spec: appsv1.DeploymentSpec{Replicas: c.replicas, Selector: c.selector,
		MinReadySeconds: c.minReadySeconds, Paused: c.paused}, Status: c.status}
}

// GetObjectKind is runtime.Object's: the cache knows the kind by informer.
func (c *cachedDeployment) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies c (client-go's mutation detector does, when on).
func (c *cachedDeployment) DeepCopyObject() runtime.Object {
	d := c.deployment().DeepCopy()
	return slimDeploymentOf(d)
}

// cachedService is the cache's copy of a Service: its metadata.
type cachedService struct {
	metav1.ObjectMeta
}

func (c *cachedService) service() *corev1.Service { return &corev1.Service{ObjectMeta: c.ObjectMeta} }

// GetObjectKind is runtime.Object's: the cache knows the kind by informer.
func (c *cachedService) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies c.
func (c *cachedService) DeepCopyObject() runtime.Object {
	return &cachedService{ObjectMeta: *c.ObjectMeta.DeepCopy()}
}

// expand is what the cache hands out for obj, one of its stored objects.
func expand(obj any) any {
	switch o := obj.(type) {
	case *cachedDeployment:
		return o.deployment()
	case *cachedService:
		return o.service()
	}
	return obj
}

func expandAll(objs []any) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = expand(o)
	}
	return out
}

// newInformer is the cache's informer constructor (cache.Options.NewInformer):
// client-go's, and for the kinds the cache stores slim, a slimInformer.
func newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	inf := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	switch obj.(type) {
	case *appsv1.Deployment, *corev1.Service:
		return slimInformer{inf}
	}
	return inf
}

// slimInformer is an informer whose store holds slim structs, read as the
// full kind.
type slimInformer struct {
	toolscache.SharedIndexInformer
}

// GetIndexer is the informer's indexer, read as the full kind.
func (s slimInformer) GetIndexer() toolscache.Indexer {
	return expandingIndexer{s.SharedIndexInformer.GetIndexer()}
}

// GetStore is GetIndexer.
func (s slimInformer) GetStore() toolscache.Store { return s.GetIndexer() }

// slimStore is the store as it is, slim structs and all.
func (s slimInformer) slimStore() toolscache.Store { return s.SharedIndexInformer.GetStore() }

// expandingIndexer reads an indexer of slim structs as the full kind.
// Only reads: the informer alone writes to its store.
type expandingIndexer struct {
	toolscache.Indexer
}

func (x expandingIndexer) List() []any { return expandAll(x.Indexer.List()) }

func (x expandingIndexer) Get(obj any) (any, bool, error) {
	o, ok, err := x.Indexer.Get(obj)
	return expand(o), ok, err
}

func (x expandingIndexer) GetByKey(key string) (any, bool, error) {
	o, ok, err := x.Indexer.GetByKey(key)
	return expand(o), ok, err
}

func (x expandingIndexer) Index(name string, obj any) ([]any, error) {
	objs, err := x.Indexer.Index(name, obj)
	return expandAll(objs), err
}

func (x expandingIndexer) ByIndex(name, value string) ([]any, error) {
	objs, err := x.Indexer.ByIndex(name, value)
	return expandAll(objs), err
}
