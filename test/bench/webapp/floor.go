package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
	"github.com/daytwo-dev/daytwo/test/bench/kwokop"
)

// A floor is a client that writes, for each WebApp, what the operator
// writes, with nothing of its logic. Two are measured:
//   - creates (the goal's floor): the WebApp created, its Deployment and
//     Service created (the operator's own, as children: owner references,
//     so the garbage collector tracks them) and one status written. No
//     reads or watches of its own.
//   - protocol: what any operator that is safe and declarative must send
//     for a new WebApp. It reads the Deployment and the Service from the
//     API server first (an object of that name someone else made must not
//     be taken over), applies them server-side as daytwo's field manager
//     (so a later apply removes what the spec drops), writes one status,
//     and watches, as an operator's informers do, every WebApp and
//     daytwo's Deployments and Services, whole. Not in it: the status a
//     WebApp gets again once its pods are available, the reconciles its
//     Deployment's status updates bring, and the watch delay before an
//     operator learns of a new WebApp (its workers start from the create).
//
// Each runs on a fresh cluster warmed as the operator's is, and the bench
// watches it converge as it watches the operator.
type floor struct {
	name     string // as printed: "floor with the WebApp kind"
	ns       string
	protocol bool
}

var (
	createsFloor  = floor{name: "floor with the WebApp kind", ns: "bench-crd"}
	protocolFloor = floor{name: "protocol floor", ns: "bench-protocol", protocol: true}
)

// floorRun times f.
func (b *bench) floorRun(ctx context.Context, f floor) (time.Duration, error) {
	if err := b.freshCluster(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx) // the watches, on every way out
	defer cancel()
	watching := func() error { return nil }
	if f.protocol {
		var err error
		if watching, err = b.informerWatches(ctx); err != nil {
			return 0, err
		}
	}
	if err := b.floorWarmUp(ctx, f); err != nil {
		return 0, err
	}
	ns := f.ns
	if err := kwokop.Namespace(ctx, b.c, ns); err != nil {
		return 0, err
	}
	w0, err := b.serverWrites(ctx)
	if err != nil {
		return 0, err
	}
	// Watched as the operator's run is: the same watches load the API
	// server on both sides, and the same stopwatch stops both.
	waitConverged, err := b.watchConvergence(ctx, ns, b.cfg.n)
	if err != nil {
		return 0, err
	}
	profiled := kwokop.CPUProfile(ctx, b.raw, nil, strings.ReplaceAll(f.name, " ", "-"), b.cfg.profileSeconds)
	cpu0 := kwokop.ProcessCPU()
	start := time.Now()
	if err := b.floorWrites(ctx, f, ns, b.cfg.n); err != nil {
		return 0, fmt.Errorf("%s: %w", f.name, err)
	}
	at, err := waitConverged(limit(b.cfg.n, 10*time.Minute))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", f.name, err)
	}
	took := at.Sub(start)
	if err := watching(); err != nil {
		return 0, fmt.Errorf("%s: %w", f.name, err) // a floor that stopped watching did less than it claims
	}
	cpu1 := kwokop.ProcessCPU()
	w1, err := b.serverWrites(ctx)
	if err != nil {
		return 0, err
	}
	profiled() // after the readings: a profile may outlast the run
	fmt.Printf("%s: %d WebApps, Deployments, Services and statuses in %.2fs\n", f.name, b.cfg.n, took.Seconds())
	printWrites("the "+f.name+"'s run", w0, w1, b.cfg.n)
	kwokop.PrintProcessCPU("the "+f.name+"'s run", cpu0, cpu1)
	return took, nil
}

// floorWrites writes n WebApps in ns as the floor does. Two pools of
// BENCH_PARALLEL, as in the operator's run: one creates the WebApps (the
// bench's clients there), the other writes each one's children and status
// as soon as it exists (the operator's workers, which learn of it later,
// through a watch).
func (b *bench) floorWrites(ctx context.Context, f floor, ns string, n int) error {
	made := make(chan *v1alpha1.WebApp, n)
	children := make(chan error, 1)
	go func() {
		children <- kwokop.Parallel(n, b.cfg.parallel, func(int) error {
			app, ok := <-made
			if !ok {
				return nil // its create failed
			}
			if f.protocol {
				return b.protocolChildren(ctx, app)
			}
			return b.floorChildren(ctx, app)
		})
	}()
	err := kwokop.Parallel(n, b.cfg.parallel, func(i int) error {
		app := benchApp(ns, i)
		if err := b.c.Create(ctx, app); err != nil {
			return err
		}
		made <- app
		return nil
	})
	close(made)
	return cmp.Or(err, <-children)
}

// floorWarmUp gives the floor's fresh cluster what the operator's has
// before its stopwatch starts (see run and warmHeap): warmApps WebApps of a
// namespace of their own, written as the floor writes them, with their
// pods available, then as long a pause. The start-up work of a new cluster
// (nodes registering, the controller manager's first syncs) then falls in
// neither side's window.
func (b *bench) floorWarmUp(ctx context.Context, f floor) error {
	const ns = "bench-warm"
	if err := kwokop.Namespace(ctx, b.c, ns); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // as the operator's start
	waitConverged, err := b.watchConvergence(ctx, ns, warmApps)
	if err != nil {
		return err
	}
	if err := b.floorWrites(ctx, f, ns, warmApps); err != nil {
		return fmt.Errorf("the floor's warm-up: %w", err)
	}
	if _, err := waitConverged(time.Minute); err != nil {
		return fmt.Errorf("the floor's warm-up: %w", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		deps := &appsv1.DeploymentList{}
		if err := b.c.List(ctx, deps, client.InNamespace(ns)); err != nil {
			return err
		}
		available := 0
		for _, d := range deps.Items {
			if d.Status.AvailableReplicas > 0 {
				available++
			}
		}
		if available == warmApps {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the floor's warm-up: %d of %d Deployments available after a minute", available, warmApps)
		}
	}
	time.Sleep(3 * time.Second) // as warmHeap's
	return nil
}

// floorChildren is what the floor writes for a WebApp it created: the
// operator's Deployment and Service, then a status.
func (b *bench) floorChildren(ctx context.Context, app *v1alpha1.WebApp) error {
	d, s, err := bareObjects(app)
	if err != nil {
		return err
	}
	if err := cmp.Or(b.c.Create(ctx, d), b.c.Create(ctx, s)); err != nil {
		return err
	}
	return b.floorStatus(ctx, app)
}

// protocolChildren is what the protocol floor writes for a WebApp it
// created: the ownership reads, the operator's Deployment and Service
// applied, then a status.
func (b *bench) protocolChildren(ctx context.Context, app *v1alpha1.WebApp) error {
	key := client.ObjectKeyFromObject(app)
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		switch err := b.c.Get(ctx, key, obj); {
		case err == nil:
			return fmt.Errorf("%T %s exists before its apply", obj, key)
		case !apierrors.IsNotFound(err):
			return err
		}
	}
	d, s := webapp.Children(app)
	owner := []client.ApplyOption{client.FieldOwner(controller.FieldOwner), client.ForceOwnership}
	if err := cmp.Or(b.c.Apply(ctx, d, owner...), b.c.Apply(ctx, s, owner...)); err != nil {
		return err
	}
	return b.floorStatus(ctx, app)
}

// informerWatches watches, until ctx ends, what the operator's informers
// watch for WebApps: every WebApp, and daytwo's Deployments and Services,
// whole. Each event is decoded and dropped. The function it returns says
// whether a watch has ended (client-go's RetryWatcher gives up on an
// expired resource version or a refusal), which leaves the floor doing
// less than it claims.
func (b *bench) informerWatches(ctx context.Context) (func() error, error) {
	ours := client.MatchingLabels{controller.ManagedByLabel: controller.ManagedBy}
	var ended atomic.Pointer[error]
	for _, w := range []struct {
		list client.ObjectList
		opts []client.ListOption
	}{{&v1alpha1.WebAppList{}, nil}, {&appsv1.DeploymentList{}, []client.ListOption{ours}}, {&corev1.ServiceList{}, []client.ListOption{ours}}} {
		ww, err := watchFrom(ctx, b.c, w.list, w.opts...)
		if err != nil {
			return nil, err
		}
		go func() {
			last := fmt.Errorf("the watch of %T ended", w.list)
			for ev := range ww.ResultChan() {
				if ev.Type == watch.Error {
					last = fmt.Errorf("the watch of %T ended: %v", w.list, ev.Object)
				}
			}
			if ctx.Err() == nil {
				ended.CompareAndSwap(nil, &last)
			}
		}()
	}
	return func() error {
		if err := ended.Load(); err != nil {
			return *err
		}
		return nil
	}, nil
}

// floorStatus writes a status for app, as the operator's first reconcile
// of it does.
func (b *bench) floorStatus(ctx context.Context, app *v1alpha1.WebApp) error {
	base := app.DeepCopy()
	app.Status = v1alpha1.WebAppStatus{ObservedGeneration: app.Generation, Replicas: 1, Selector: "daytwo.dev/webapp=" + app.Name,
		ServiceURL: fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", app.Name, app.Namespace, app.Spec.Port), CurrentImage: app.Spec.Image}
	app.Status.URL = app.Status.ServiceURL
	now := metav1.Now()
	for _, c := range []string{"Ready", "Progressing", "Degraded"} {
		app.Status.Conditions = append(app.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionFalse,
			Reason: "Floor", Message: "written by the floor client", ObservedGeneration: app.Generation, LastTransitionTime: now})
	}
	return b.c.Status().Patch(ctx, app, client.MergeFrom(base))
}

// bareObjects are the Deployment and Service the operator applies for app
// (webapp.Children), as objects a client creates. Without a UID (the bare
// client's run, which creates no WebApp) they have no owner.
func bareObjects(app *v1alpha1.WebApp) (*appsv1.Deployment, *corev1.Service, error) {
	dac, sac := webapp.Children(app)
	d, s := &appsv1.Deployment{}, &corev1.Service{}
	for _, p := range []struct{ from, to any }{{dac, d}, {sac, s}} {
		raw, err := json.Marshal(p.from)
		if err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal(raw, p.to); err != nil {
			return nil, nil, err
		}
	}
	if app.UID == "" {
		d.OwnerReferences, s.OwnerReferences = nil, nil
	}
	return d, s, nil
}
