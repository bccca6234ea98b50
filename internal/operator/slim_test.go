package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/daytwo-dev/daytwo/internal/controller"
)

// listWatch serves a fixed list and then the events a test sends: the
// informer under test is client-go's own, run without an API server (a
// fake, and the only one here) because the test must plant a sentinel in
// the store between the list and exactly one status event.
// TestCacheReadsSlimChildrenWhole reads the same path through envtest.
type listWatch struct {
	*toolscache.ListWatch
}

// IsWatchListSemanticsUnSupported makes the reflector list, then watch.
func (listWatch) IsWatchListSemanticsUnSupported() bool { return true }

// run runs inf with transform t until the test ends, once it has synced.
func run(t *testing.T, inf toolscache.SharedIndexInformer, transform toolscache.TransformFunc) {
	t.Helper()
	if err := inf.SetTransform(transform); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(t.Context())
	if !toolscache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
		t.Fatal("the informer never synced")
	}
}

// A slimInformer runs client-go's informer over slim structs: field
// indexes, readers and event handlers get the full kind, and a Deployment's transform
// reads the copy an event replaces from the informer's own store, so a
// status update keeps the stored fingerprint without extracting again.
func TestSlimInformerReadsWholeAndRemembersFingerprints(t *testing.T) {
	served := servedDeployment(nil)
	served.UID, served.Generation, served.ResourceVersion = "uid-1", 1, "1"
	events := watch.NewFake()
	lw := listWatch{&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &appsv1.DeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []appsv1.Deployment{*served.DeepCopy()}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return events, nil },
	}}
	inf := newInformer(lw, &appsv1.Deployment{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := inf.AddIndexers(toolscache.Indexers{"image": func(obj any) ([]string, error) {
		return []string{obj.(*appsv1.Deployment).Annotations[controller.CachedImagePrefix+"app"]}, nil // panics on anything but the full kind
	}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handled []string // what a handler was given, by event
	record := func(event string, objs ...any) {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range objs {
			event += fmt.Sprintf(" %T", o)
		}
		handled = append(handled, event)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(oldObj, newObj any) { record("update", oldObj, newObj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	run(t, inf, transform)
	objs, err := inf.GetIndexer().ByIndex("image", "shop:1")
	if err != nil || len(objs) != 1 {
		t.Fatalf("by the image index: %v, %v", objs, err)
	}
	got, ok := objs[0].(runtime.Object).DeepCopyObject().(*appsv1.Deployment)
	if !ok || got.UID != "uid-1" || *got.Spec.Replicas != 3 || got.Status.Conditions[0].Reason != "NewReplicaSetAvailable" {
		t.Fatalf("a copy of what the indexer holds: %#v", objs[0])
	}
	fp := got.Annotations[controller.CachedOwnedFingerprint]
	if fp == "" {
		t.Fatal("the stored Deployment has no fingerprint")
	}

	// Plant a sentinel in the stored copy: only a fingerprint carried over
	// from it, not a new extraction, reads it.
	stored, _, _ := inf.(slimInformer).SharedIndexInformer.GetStore().GetByKey("ns/web")
	_, src, _ := strings.Cut(fp, "/")
	stored.(*cachedDeployment).Annotations[controller.CachedOwnedFingerprint] = "sentinel/" + src
	status := served.DeepCopy()
	status.ResourceVersion, status.Status.ReadyReplicas = "2", 3
	events.Modify(status)
	var now *appsv1.Deployment
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		o, _, _ := inf.GetStore().GetByKey("ns/web")
		if now = o.(runtime.Object).DeepCopyObject().(*appsv1.Deployment); now.ResourceVersion == "2" {
			break
		}
	}
	if now.ResourceVersion != "2" || now.Status.ReadyReplicas != 3 {
		t.Fatalf("the status update never reached the store: %+v", now.Status)
	}
	if got := now.Annotations[controller.CachedOwnedFingerprint]; got != "sentinel/"+src {
		t.Fatalf("a status update took fingerprint %q, not the stored copy's", got)
	}

	// Handlers were given the full kind, and are for a delete.
	events.Delete(status)
	want := []string{"add *v1.Deployment", "update *v1.Deployment *v1.Deployment", "delete *v1.Deployment"}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := slices.Clone(handled)
		mu.Unlock()
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handlers were given %q, want %q", got, want)
		}
	}
}

// A delete the informer learns of only by a relist comes as a tombstone:
// its object too is the full kind.
func TestExpandingHandlerExpandsTombstones(t *testing.T) {
	var got any
	h := expandingHandler{toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) { got = obj }}}
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/web", Obj: &cachedService{ObjectMeta: metav1.ObjectMeta{Name: "web"}}})
	if gone, ok := got.(toolscache.DeletedFinalStateUnknown); !ok {
		t.Fatalf("the handler was given a %T", got)
	} else if s, ok := gone.Obj.(*corev1.Service); !ok || s.Name != "web" {
		t.Fatalf("the tombstone holds a %T", gone.Obj)
	}
}

// An informer without a transform (client-go's nil) stores what the watch
// sends, and a slimInformer's transform wrapper keeps that meaning.
func TestSlimInformerWithoutTransform(t *testing.T) {
	lw := listWatch{&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []corev1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}}}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}}
	inf := newInformer(lw, &corev1.Service{}, 0, toolscache.Indexers{})
	run(t, inf, nil)
	if o, ok, err := inf.GetStore().GetByKey("ns/web"); err != nil || !ok {
		t.Fatalf("the Service was not stored: %v %v", o, err)
	}
}
