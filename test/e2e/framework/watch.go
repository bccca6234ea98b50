//go:build e2e

package framework

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/operator"
)

// WatchStatuses records every status a Database shows from now on, each
// write seen by a watch, so a test sees states a poll would miss. The
// returned function stops the watch and returns what it saw, in order.
func (c *Cluster) WatchStatuses(t *testing.T, ns, name string) func() []v1alpha1.DatabaseStatus {
	t.Helper()
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: operator.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	list := &v1alpha1.DatabaseList{}
	w, err := wc.Watch(context.Background(), list, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []v1alpha1.DatabaseStatus
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if db, ok := ev.Object.(*v1alpha1.Database); ok && ev.Type != watch.Error {
				mu.Lock()
				seen = append(seen, *db.Status.DeepCopy())
				mu.Unlock()
			}
		}
	}()
	stopped := false
	stop := func() []v1alpha1.DatabaseStatus {
		if !stopped {
			stopped = true
			w.Stop()
			<-done
		}
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	t.Cleanup(func() { stop() })
	return stop
}
