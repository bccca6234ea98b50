//go:build e2e

package framework

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/scheme"
)

// WatchStatuses records every status a Database shows from now on, each
// write seen by a watch, so a test sees states a poll would miss. The
// returned function stops the watch and returns what it saw, in order.
func (c *Cluster) WatchStatuses(t *testing.T, ns, name string) func() []v1alpha1.DatabaseStatus {
	t.Helper()
	return watchNamed(c, t, &v1alpha1.DatabaseList{}, ns, name, func(db *v1alpha1.Database) v1alpha1.DatabaseStatus {
		return *db.Status.DeepCopy()
	})
}

// WatchWebAppStatuses is WatchStatuses for a WebApp.
func (c *Cluster) WatchWebAppStatuses(t *testing.T, ns, name string) func() []v1alpha1.WebAppStatus {
	t.Helper()
	return watchNamed(c, t, &v1alpha1.WebAppList{}, ns, name, func(app *v1alpha1.WebApp) v1alpha1.WebAppStatus {
		return *app.Status.DeepCopy()
	})
}

// watchNamed watches the object of kind T named name in ns and records
// what pick takes of every version of it the watch delivers.
func watchNamed[T client.Object, S any](c *Cluster, t *testing.T, list client.ObjectList, ns, name string, pick func(T) S) func() []S {
	t.Helper()
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), list, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []S
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(T); ok && ev.Type != watch.Error {
				mu.Lock()
				seen = append(seen, pick(obj))
				mu.Unlock()
			}
		}
	}()
	stopped := false
	stop := func() []S {
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
