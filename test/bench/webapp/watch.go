package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// converged counts the WebApps in ns with a current status and both children.
func (b *bench) converged(ctx context.Context, ns string) (int, error) {
	apps := &v1alpha1.WebAppList{}
	deps := &metav1.PartialObjectMetadataList{}
	deps.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("DeploymentList"))
	svcs := &metav1.PartialObjectMetadataList{}
	svcs.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceList"))
	for _, l := range []client.ObjectList{apps, deps, svcs} {
		if err := b.c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return 0, err
		}
	}
	has := func(l *metav1.PartialObjectMetadataList) map[string]bool {
		m := map[string]bool{}
		for _, o := range l.Items {
			m[o.Name] = true
		}
		return m
	}
	d, s := has(deps), has(svcs)
	n := 0
	for _, a := range apps.Items {
		if a.Status.ObservedGeneration == a.Generation && meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady) != nil &&
			d[a.Name] && s[a.Name] {
			n++
		}
	}
	return n, nil
}

// waitAllReady waits until the n WebApps in ns all report Ready=True.
func (b *bench) waitAllReady(ctx context.Context, ns string, n int, timeout time.Duration) error {
	start := time.Now()
	ready := 0
	for time.Since(start) < timeout {
		apps := &v1alpha1.WebAppList{}
		if err := b.c.List(ctx, apps, client.InNamespace(ns)); err != nil {
			return err
		}
		ready = 0
		for _, a := range apps.Items {
			if meta.IsStatusConditionTrue(a.Status.Conditions, v1alpha1.ConditionReady) {
				ready++
			}
		}
		if ready == n {
			fmt.Printf("every WebApp Ready %.1fs after convergence\n", time.Since(start).Seconds())
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("%d of %d WebApps Ready after %s", ready, n, timeout)
}

// watchConvergence starts watching ns and returns a wait that blocks until
// n WebApps have a current status and their Deployment and Service exist,
// and returns when the watches saw the last of them (not when the list
// that confirms it returned).
// It watches rather than lists: listing thousands of objects every few
// hundred milliseconds would load the API server the measured side
// shares. A list confirms the result once.
func (b *bench) watchConvergence(ctx context.Context, ns string, n int) (wait func(time.Duration) (time.Time, error), err error) {
	ctx, cancel := context.WithCancel(ctx)
	c := b.c
	type seen struct {
		kind, name string
		ok, gone   bool
	}
	ch := make(chan seen, 1024)
	follow := func(list client.ObjectList, kind string, ok func(runtime.Object) bool) error {
		w, err := watchFrom(ctx, c, list, client.InNamespace(ns))
		if err != nil {
			return err
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				o, isObj := ev.Object.(client.Object)
				if !isObj {
					fmt.Printf("  the watch of %ss ended: %v\n", kind, ev.Object)
					continue
				}
				select {
				case ch <- seen{kind, o.GetName(), ok(ev.Object), ev.Type == watch.Deleted}:
				case <-ctx.Done():
					return
				}
			}
		}()
		return nil
	}
	exists := func(runtime.Object) bool { return true }
	deps := &metav1.PartialObjectMetadataList{}
	deps.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("DeploymentList"))
	svcs := &metav1.PartialObjectMetadataList{}
	svcs.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceList"))
	for _, err := range []error{
		follow(&v1alpha1.WebAppList{}, "app", func(o runtime.Object) bool {
			a, isApp := o.(*v1alpha1.WebApp)
			return isApp && a.Status.ObservedGeneration == a.Generation && meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady) != nil
		}),
		follow(deps, "deployment", exists),
		follow(svcs, "service", exists),
	} {
		if err != nil {
			cancel()
			return nil, err
		}
	}
	// Events are counted as they come, so no watch is left unread (the
	// API server ends a watch whose client falls behind).
	var converged atomic.Int64
	all := make(chan struct{})
	var convergedAt time.Time // written before all closes, read after
	go func() {
		state := map[string]map[string]bool{"app": {}, "deployment": {}, "service": {}}
		done := func(name string) bool {
			return state["app"][name] && state["deployment"][name] && state["service"][name]
		}
		closed := false
		for {
			select {
			case s := <-ch:
				before := done(s.name)
				state[s.kind][s.name] = s.ok && !s.gone
				if after := done(s.name); after != before {
					if after && converged.Add(1) == int64(n) && !closed {
						closed = true
						convergedAt = time.Now()
						close(all)
					} else if !after {
						converged.Add(-1)
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return func(timeout time.Duration) (time.Time, error) {
		defer cancel()
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for limit := time.After(timeout); ; {
			select {
			case <-all:
			case <-tick.C:
				fmt.Printf("  %d of %d WebApps converged\n", converged.Load(), n)
				continue
			case <-limit:
				return time.Time{}, fmt.Errorf("%d of %d WebApps converged after %s", converged.Load(), n, timeout)
			}
			break
		}
		if got, err := b.converged(ctx, ns); err != nil || got != n {
			return time.Time{}, fmt.Errorf("the watches saw %d WebApps converge, a list %d (%v)", n, got, err) //nolint:errorlint // err is nil when the counts differ
		}
		return convergedAt, nil
	}, nil
}

// watchFrom watches list's kind through c (opts select which) from now
// on, started again where it was whenever the API server ends it (its
// timeout, or a client it finds too slow, as at N=10,000): client-go's
// RetryWatcher, from the resource version of a one-item list. A watch from
// no resource version would begin with every object as added. c is the
// caller's: freshCluster replaces b.c, and a watch that resumes keeps its
// own cluster's client.
func watchFrom(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	if err := c.List(ctx, list, append(slices.Clone(opts), client.Limit(1))...); err != nil {
		return nil, err
	}
	return watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, list, append(slices.Clone(opts), &client.ListOptions{Raw: &o})...)
		}})
}
