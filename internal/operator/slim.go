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

// The informer cache holds one Deployment and one Service per WebApp (and
// per Database pool). Of an appsv1.Deployment the transform keeps only
// metadata, four spec fields and the status, yet the struct alone is
// 1,208 bytes (1,280 allocated);
// a corev1.Service keeps only metadata, in 640. So the cache stores each
// as a struct of only what it keeps (cachedDeployment, 352 bytes;
// cachedService, 240), and hands out the full type on every read: a
// slimInformer's indexer hands controller-runtime's cache reader views
// whose deep copy (which the reader makes of any cached object) is the
// full kind. Field indexes are given the full kind too.
//
// Event handlers are given the full kind too (expandingHandler), with
// what the transform keeps, as readers are, so a handler or predicate
// typed on *appsv1.Deployment or *corev1.Service gets its events:
// controller-runtime drops, with a "missing Object" log, an event whose
// object is not of the handler's type. (client-go names handlers by type
// in its traces: on these informers each is an expandingHandler.) The
// Deployment informer's transform is always transformDeployment's
// (slimInformer.SetTransform), whatever cache.Options say.

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
	return slimDeploymentOf(deploymentView{c}.DeepCopyObject().(*appsv1.Deployment))
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

// deploymentView and serviceView are stored slim structs as a reader of
// the indexer gets them: their deep copy is the full kind, built at once
// (one allocation, not an expansion and then its copy).
type deploymentView struct{ *cachedDeployment }

type serviceView struct{ *cachedService }

// DeepCopyObject is a deep copy of the Deployment v stands for.
func (v deploymentView) DeepCopyObject() runtime.Object {
	out := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{MinReadySeconds: v.minReadySeconds, Paused: v.paused}}
	v.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if v.replicas != nil {
		out.Spec.Replicas = new(*v.replicas)
	}
	out.Spec.Selector = v.selector.DeepCopy()
	v.status.DeepCopyInto(&out.Status)
	return out
}

// DeepCopyObject is a deep copy of the Service v stands for.
func (v serviceView) DeepCopyObject() runtime.Object {
	out := &corev1.Service{}
	v.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// view is what the indexer hands out for obj, one of its stored objects.
func view(obj any) any {
	switch o := obj.(type) {
	case *cachedDeployment:
		return deploymentView{o}
	case *cachedService:
		return serviceView{o}
	}
	return obj
}

func viewAll(objs []any) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = view(o)
	}
	return out
}

// expand is the full kind obj, a stored slim struct or a view of one,
// stands for, sharing its maps and slices; anything else is itself.
func expand(obj any) any {
	switch o := obj.(type) {
	case *cachedDeployment:
		return o.deployment()
	case deploymentView:
		return o.deployment()
	case *cachedService:
		return o.service()
	case serviceView:
		return o.service()
	}
	return obj
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

// GetIndexer is the informer's indexer, its objects read as views.
func (s slimInformer) GetIndexer() toolscache.Indexer {
	return viewingIndexer{s.SharedIndexInformer.GetIndexer()}
}

// GetStore is GetIndexer.
func (s slimInformer) GetStore() toolscache.Store { return s.GetIndexer() }

// AddIndexers adds indexers that are given the full kind.
func (s slimInformer) AddIndexers(indexers toolscache.Indexers) error {
	full := make(toolscache.Indexers, len(indexers))
	for name, f := range indexers {
		full[name] = func(obj any) ([]string, error) { return f(expand(obj)) }
	}
	return s.SharedIndexInformer.AddIndexers(full)
}

// AddEventHandler adds handler, given the full kind (expandingHandler).
func (s slimInformer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.SharedIndexInformer.AddEventHandler(expandingHandler{handler})
}

// AddEventHandlerWithResyncPeriod adds handler, given the full kind.
func (s slimInformer) AddEventHandlerWithResyncPeriod(handler toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.SharedIndexInformer.AddEventHandlerWithResyncPeriod(expandingHandler{handler}, resync)
}

// AddEventHandlerWithOptions adds handler, given the full kind.
func (s slimInformer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, options toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.SharedIndexInformer.AddEventHandlerWithOptions(expandingHandler{handler}, options)
}

// expandingHandler hands its handler the full kind of each stored slim
// struct (expand: an allocation per object, per handler, sharing the
// struct's maps and slices, which handlers must not change, as with any
// informer's objects). A resync's update, of an object to itself, expands
// it once.
type expandingHandler struct {
	toolscache.ResourceEventHandler
}

func (h expandingHandler) OnAdd(obj any, isInInitialList bool) {
	h.ResourceEventHandler.OnAdd(expand(obj), isInInitialList)
}

func (h expandingHandler) OnUpdate(oldObj, newObj any) {
	full := expand(newObj)
	old := full
	if oldObj != newObj {
		old = expand(oldObj)
	}
	h.ResourceEventHandler.OnUpdate(old, full)
}

func (h expandingHandler) OnDelete(obj any) {
	if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		gone.Obj = expand(gone.Obj)
		obj = gone
	}
	h.ResourceEventHandler.OnDelete(expand(obj))
}

// SetTransform sets the informer's transform: for a Deployment,
// transformDeployment, given the copy the event replaces from the
// informer's own store (see fingerprintDeployment); for anything else, t.
func (s slimInformer) SetTransform(t toolscache.TransformFunc) error {
	store := s.SharedIndexInformer.GetStore()
	return s.SharedIndexInformer.SetTransform(func(in any) (any, error) {
		d, ok := in.(*appsv1.Deployment)
		switch {
		case !ok && t == nil: // client-go's "no transform"
			return in, nil
		case !ok:
			return t(in)
		}
		var previous metav1.Object
		if o, exists, err := store.GetByKey(d.Namespace + "/" + d.Name); err == nil && exists {
			if c, ok := o.(*cachedDeployment); ok {
				previous = c // never a nil *cachedDeployment in a non-nil interface
			}
		}
		return slimDeploymentOf(transformDeployment(d, previous)), nil
	})
}

// viewingIndexer reads an indexer of slim structs as views. Only reads:
// the informer alone writes to its store.
type viewingIndexer struct {
	toolscache.Indexer
}

func (x viewingIndexer) List() []any { return viewAll(x.Indexer.List()) }

func (x viewingIndexer) Get(obj any) (any, bool, error) {
	o, ok, err := x.Indexer.Get(obj)
	return view(o), ok, err
}

func (x viewingIndexer) GetByKey(key string) (any, bool, error) {
	o, ok, err := x.Indexer.GetByKey(key)
	return view(o), ok, err
}

func (x viewingIndexer) Index(name string, obj any) ([]any, error) {
	objs, err := x.Indexer.Index(name, obj)
	return viewAll(objs), err
}

func (x viewingIndexer) ByIndex(name, value string) ([]any, error) {
	objs, err := x.Indexer.ByIndex(name, value)
	return viewAll(objs), err
}
