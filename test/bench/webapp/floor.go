package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
	"github.com/daytwo-dev/daytwo/test/bench/kwokop"
)

// crdFloorRun times, on a fresh cluster warmed as the operator's is, the
// least a client writing daytwo's objects must do for each WebApp: the
// WebApp created, its Deployment and Service created (the operator's own,
// as children: owner references, so the garbage collector tracks them),
// and one status written. Creates, not server-side applies, and no reads
// or watches of its own: a floor. The bench watches it converge as it
// watches the operator.
func (b *bench) crdFloorRun(ctx context.Context) (time.Duration, error) {
	if err := b.freshCluster(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx) // the watches, on every way out
	defer cancel()
	if err := b.floorWarmUp(ctx); err != nil {
		return 0, err
	}
	const ns = "bench-crd"
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
	profiled := kwokop.CPUProfile(ctx, b.raw, nil, "floor", b.cfg.profileSeconds)
	cpu0 := kwokop.ProcessCPU()
	start := time.Now()
	if err := b.floorWrites(ctx, ns, b.cfg.n); err != nil {
		return 0, fmt.Errorf("floor with the WebApp kind: %w", err)
	}
	at, err := waitConverged(limit(b.cfg.n, 10*time.Minute))
	if err != nil {
		return 0, fmt.Errorf("floor with the WebApp kind: %w", err)
	}
	took := at.Sub(start)
	cpu1 := kwokop.ProcessCPU()
	w1, err := b.serverWrites(ctx)
	if err != nil {
		return 0, err
	}
	profiled() // after the readings: a profile may outlast the run
	fmt.Printf("floor with the WebApp kind: %d WebApps, Deployments, Services and statuses in %.2fs\n", b.cfg.n, took.Seconds())
	printWrites("the floor's run with the WebApp kind", w0, w1, b.cfg.n)
	kwokop.PrintProcessCPU("the floor's run", cpu0, cpu1)
	return took, nil
}

// floorWrites writes n WebApps in ns as the floor does. Two pools of
// BENCH_PARALLEL, as in the operator's run: one creates the WebApps (the
// bench's clients there), the other writes each one's children and status
// as soon as it exists (the operator's workers, which learn of it later,
// through a watch).
func (b *bench) floorWrites(ctx context.Context, ns string, n int) error {
	made := make(chan *v1alpha1.WebApp, n)
	children := make(chan error, 1)
	go func() {
		children <- kwokop.Parallel(n, b.cfg.parallel, func(int) error {
			app, ok := <-made
			if !ok {
				return nil // its create failed
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
func (b *bench) floorWarmUp(ctx context.Context) error {
	const ns = "bench-warm"
	if err := kwokop.Namespace(ctx, b.c, ns); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // as the operator's start
	waitConverged, err := b.watchConvergence(ctx, ns, warmApps)
	if err != nil {
		return err
	}
	if err := b.floorWrites(ctx, ns, warmApps); err != nil {
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
