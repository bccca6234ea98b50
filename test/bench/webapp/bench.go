package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
	"github.com/daytwo-dev/daytwo/test/bench/kwokop"
)

type bench struct {
	cfg config
	c   client.WithWatch
	raw rest.Interface
	op  *kwokop.Operator
}

func newBench(cfg config) (*bench, error) {
	if cfg.bin == "" {
		return nil, errors.New("DAYTWO_BIN is not set: run `make bench-webapp`")
	}
	c, raw, err := kwokop.Clients()
	if err != nil {
		return nil, err
	}
	return &bench{cfg: cfg, c: c, raw: raw, op: &kwokop.Operator{Bin: cfg.bin, Name: "bench-webapp", Parallel: cfg.parallel}}, nil
}

// serverWrites counts the API server's mutating requests so far by
// "verb resource", its reads (GET, LIST) under readPrefix, its request
// seconds under durationPrefix and its CPU seconds under serverCPU: every
// client's, the operator's, the bench's, the controller manager's and
// kwok's.
func (b *bench) serverWrites(ctx context.Context) (map[string]float64, error) {
	body, err := b.raw.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range families["process_cpu_seconds_total"].GetMetric() {
		out[serverCPU] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out[durationPrefix+l["verb"]+" "+l["resource"]+"/"+l["subresource"]] += m.GetHistogram().GetSampleSum()
	}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE":
			out[key] += m.GetCounter().GetValue()
		case "GET", "LIST":
			out[readPrefix+key] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// serverCPU is the key of the API server's CPU seconds in serverWrites.
const serverCPU = "cpu"

// durationPrefix marks the API server's request seconds in serverWrites.
const durationPrefix = "seconds "

// readPrefix marks the API server's reads (GET, LIST) in serverWrites.
const readPrefix = "read "

// printWrites prints the API server's writes between two serverWrites
// readings, per WebApp, most first.
func printWrites(phase string, before, after map[string]float64, n int) {
	writes := kwokop.Growth(before, after, func(k string) (string, bool) {
		return k, k != serverCPU && !strings.HasPrefix(k, durationPrefix) && !strings.HasPrefix(k, readPrefix)
	})
	total := 0.0
	for _, r := range writes {
		total += r.By
	}
	fmt.Printf("API server during %s: %.1f CPU seconds, %.0f writes (%.1f per WebApp)", phase, after[serverCPU]-before[serverCPU], total, total/float64(n))
	for _, r := range writes {
		if r.By/float64(n) >= 0.05 {
			fmt.Printf("; %s %.2f", r.Key, r.By/float64(n))
		}
	}
	fmt.Println()
	prefixed := func(prefix string) func(string) (string, bool) {
		return func(k string) (string, bool) { return strings.CutPrefix(k, prefix) }
	}
	reads := kwokop.Growth(before, after, prefixed(readPrefix))
	fmt.Printf("  reads per WebApp:")
	for _, r := range reads[:min(6, len(reads))] {
		fmt.Printf(" %s %.2f;", r.Key, r.By/float64(n))
	}
	fmt.Println()
	slow := kwokop.Growth(before, after, prefixed(durationPrefix))
	fmt.Printf("  request seconds by verb and resource:")
	for _, r := range slow[:min(8, len(slow))] {
		fmt.Printf(" %s %.1f;", r.Key, r.By)
	}
	fmt.Println()
}

// warmApps is how many WebApps the operator runs before its heap is first
// measured.
const warmApps = 10

// warmHeap measures the operator's heap (see heap) empty, then again once
// warmApps WebApps of a namespace of their own are Ready. The second is the
// base of the per-WebApp figure: what the first WebApps bring once (the
// apply configurations' schema parser alone is 3 MiB, JSON and
// structured-merge-diff type caches, the child kinds' first objects) is
// the operator's fixed heap, which the benchmark would otherwise count as
// N WebApps' (a 3 KB difference at N=1000, 0.3 KB at 10,000).
func (b *bench) warmHeap(ctx context.Context) (heapEmpty, liveEmpty, heapWarm, liveWarm float64, err error) {
	heapEmpty, liveEmpty, err = b.op.Heap()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if err := kwokop.Namespace(ctx, b.c, "bench-warm"); err != nil {
		return 0, 0, 0, 0, err
	}
	if err := kwokop.Parallel(warmApps, warmApps, func(i int) error { return b.c.Create(ctx, benchApp("bench-warm", i)) }); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("create the warm-up WebApps: %w", err)
	}
	if err := b.waitAllReady(ctx, "bench-warm", warmApps, time.Minute); err != nil {
		return 0, 0, 0, 0, err
	}
	time.Sleep(3 * time.Second)
	heapWarm, liveWarm, err = b.op.Heap()
	return heapEmpty, liveEmpty, heapWarm, liveWarm, err
}

// freshCluster replaces the kwok cluster with an empty one of the same
// nodes, with daytwo's CRDs, and points the bench's clients at it.
func (b *bench) freshCluster(ctx context.Context) error {
	if err := kwokop.FreshCluster(ctx); err != nil {
		return err
	}
	c, raw, err := kwokop.Clients()
	if err != nil {
		return err
	}
	b.c, b.raw = c, raw
	return nil
}

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
	profiled()
	fmt.Printf("floor with the WebApp kind: %d WebApps, Deployments, Services and statuses in %.2fs\n", b.cfg.n, took.Seconds())
	w1, err := b.serverWrites(ctx)
	if err != nil {
		return 0, err
	}
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

// limit is a wait's time limit at n WebApps, given the limit at 1000.
func limit(n int, at1000 time.Duration) time.Duration {
	return max(at1000, at1000*time.Duration(n)/1000)
}

func benchApp(ns string, i int) *v1alpha1.WebApp {
	return &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%04d", i)},
		Spec: v1alpha1.WebAppSpec{Image: "localhost/daytwo-demo-web:dev", Port: 8080, Replicas: ptr.To[int32](1),
			Env: []corev1.EnvVar{{Name: "GREETING", Value: "bench"}}},
	}
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
// hundred milliseconds would load the API server that both sides share,
// and count against the operator only. A list confirms the result once.
func (b *bench) watchConvergence(ctx context.Context, ns string, n int) (wait func(time.Duration) (time.Time, error), err error) {
	ctx, cancel := context.WithCancel(ctx)
	type seen struct {
		kind, name string
		ok, gone   bool
	}
	ch := make(chan seen, 1024)
	follow := func(list client.ObjectList, kind string, ok func(runtime.Object) bool) error {
		w, err := b.watchFrom(ctx, list, ns)
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

// watchFrom watches list's kind in ns from now on, started again where it
// was whenever the API server ends it (its timeout, or a client it finds
// too slow, as at N=10,000): client-go's RetryWatcher, from the resource
// version of a one-item list. A watch from no resource version would begin
// with every object as added.
func (b *bench) watchFrom(ctx context.Context, list client.ObjectList, ns string) (watch.Interface, error) {
	if err := b.c.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
		return nil, err
	}
	return watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return b.c.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &o})
		}})
}

// latency changes BENCH_RATE specs a second for the configured duration and
// returns each change's time from write to status observed.
func (b *bench) latency(ctx context.Context, ns string) ([]time.Duration, error) {
	// From now on, not from every WebApp as added: at N=10,000 that first
	// burst got the watch ended by the API server, and 419 of 600 changes
	// went unobserved.
	w, err := b.watchFrom(ctx, &v1alpha1.WebAppList{}, ns)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	type pending struct {
		gen int64
		at  time.Time
	}
	var mu sync.Mutex
	waiting := map[string]pending{}
	var out []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			a, ok := ev.Object.(*v1alpha1.WebApp)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			if p, ok := waiting[a.Name]; ok && a.Status.ObservedGeneration >= p.gen {
				out = append(out, time.Since(p.at))
				delete(waiting, a.Name)
			}
			mu.Unlock()
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(b.cfg.rate))
	defer tick.Stop()
	end := time.Now().Add(b.cfg.duration)
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		a := &v1alpha1.WebApp{}
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("app-%04d", i%b.cfg.n)}, a); err != nil {
			return nil, err
		}
		a.Spec.Env = []corev1.EnvVar{{Name: "GREETING", Value: fmt.Sprintf("change-%d", i)}}
		start := time.Now()
		if err := b.c.Update(ctx, a); err != nil {
			continue // a conflict with the operator's status write: the next tick tries another app
		}
		mu.Lock()
		waiting[a.Name] = pending{gen: a.Generation, at: start}
		mu.Unlock()
	}
	time.Sleep(5 * time.Second) // the last changes settle
	w.Stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(waiting) > 0 {
		return out, fmt.Errorf("%d spec changes were never observed in status", len(waiting))
	}
	slices.Sort(out)
	return out, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func (b *bench) run(ctx context.Context) error {
	n, p := b.cfg.n, b.cfg.parallel
	fmt.Printf("bench-webapp: N=%d parallelism=%d, latency %d changes/s for %s\n", n, p, b.cfg.rate, b.cfg.duration)
	// Floor: a bare client writes the same Deployments and Services.
	if err := kwokop.Namespace(ctx, b.c, "bench-bare"); err != nil {
		return err
	}
	w0, err := b.serverWrites(ctx)
	if err != nil {
		return err
	}
	procs0 := kwokop.ProcessCPU()
	start := time.Now()
	if err := kwokop.Parallel(n, p, func(i int) error {
		d, s, err := bareObjects(benchApp("bench-bare", i))
		if err != nil {
			return err
		}
		return cmp.Or(b.c.Create(ctx, d), b.c.Create(ctx, s))
	}); err != nil {
		return fmt.Errorf("bare client: %w", err)
	}
	bare := time.Since(start)
	procs1 := kwokop.ProcessCPU()
	fmt.Printf("bare client: %d Deployments + Services in %.2fs\n", n, bare.Seconds())
	w1, err := b.serverWrites(ctx)
	if err != nil {
		return err
	}
	printWrites("the bare client's run", w0, w1, n)
	kwokop.PrintProcessCPU("the bare client's run", procs0, procs1)
	var crdFloor time.Duration
	if b.cfg.crdFloor {
		if crdFloor, err = b.crdFloorRun(ctx); err != nil {
			return err
		}
	}

	// The operator gets a cluster as empty as the bare client had: on the
	// same one it would pay for the bare client's objects (a Service's
	// cluster IP allocation, for one, scans every allocated address).
	if err := b.freshCluster(ctx); err != nil {
		return err
	}
	if err := kwokop.Namespace(ctx, b.c, "bench-op"); err != nil {
		return err
	}
	if err := b.op.Start(); err != nil {
		return err
	}
	defer func() { b.op.Stop() }()
	time.Sleep(2 * time.Second)
	m0, err := b.op.Scrape()
	if err != nil {
		return err
	}
	heapEmpty, liveEmpty, heap0, live0, err := b.warmHeap(ctx)
	if err != nil {
		return err
	}

	w2, err := b.serverWrites(ctx)
	if err != nil {
		return err
	}
	cpu0, err := b.op.Scrape()
	if err != nil {
		return err
	}
	waitConverged, err := b.watchConvergence(ctx, "bench-op", n)
	if err != nil {
		return err
	}
	profiled := kwokop.CPUProfile(ctx, b.raw, b.op, "operator", b.cfg.profileSeconds)
	procs0 = kwokop.ProcessCPU()
	start = time.Now()
	if err := kwokop.Parallel(n, p, func(i int) error { return b.c.Create(ctx, benchApp("bench-op", i)) }); err != nil {
		return fmt.Errorf("create WebApps: %w", err)
	}
	at, err := waitConverged(limit(n, 10*time.Minute))
	if err != nil {
		return err
	}
	op := at.Sub(start)
	procs1 = kwokop.ProcessCPU()
	profiled()
	fmt.Printf("operator:    %d WebApps converged in %.2fs\n", n, op.Seconds())
	w3, err := b.serverWrites(ctx)
	if err != nil {
		return err
	}
	printWrites("the operator's run", w2, w3, n)
	kwokop.PrintProcessCPU("the operator's run", procs0, procs1)
	if cpu1, err := b.op.Scrape(); err == nil {
		used := cpu1["process_cpu_seconds_total"] - cpu0["process_cpu_seconds_total"]
		const reconciles, requests = "controller_runtime_reconcile_total{controller=webapp}", "rest_client_requests_total"
		fmt.Printf("operator CPU during its run: %.1f s (%.0f%% of one core); per WebApp %.2f reconciles, %.2f requests to the API server\n",
			used, 100*used/op.Seconds(), (cpu1[reconciles]-cpu0[reconciles])/float64(n), (cpu1[requests]-cpu0[requests])/float64(n))
	}
	// Convergence counts a current status, not ready pods: kwok and the
	// controller manager go on updating pods and Deployments, and each
	// WebApp's status with them. The memory and the no-op resync below are
	// measured on a settled cluster, every WebApp Ready.
	if err := b.waitAllReady(ctx, "bench-op", n, limit(n, 3*time.Minute)); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	m1, err := b.op.Scrape()
	if err != nil {
		return err
	}
	heap1, live1, err := b.op.MeasuredHeap()
	if err != nil {
		return err
	}
	rss0, rss1 := m0["process_resident_memory_bytes"], m1["process_resident_memory_bytes"]
	perObject, livePerObject := (heap1-heap0)/float64(n), (live1-live0)/float64(n)
	fmt.Printf("memory: heap in use after GC %.1f -> (%d warm-up WebApps) %.1f -> %.1f MiB (live objects %.1f -> %.1f -> %.1f MiB), RSS %.1f -> %.1f MiB\n",
		heapEmpty/(1<<20), warmApps, heap0/(1<<20), heap1/(1<<20), liveEmpty/(1<<20), live0/(1<<20), live1/(1<<20), rss0/(1<<20), rss1/(1<<20))
	fmt.Printf("memory per WebApp: %.0f bytes in use, %.0f live, from the warm heap; %.0f in use, %.0f live, from the empty one (the operator's fixed heap spread over %d)\n",
		perObject, livePerObject, (heap1-heapEmpty)/float64(n), (live1-liveEmpty)/float64(n), n)

	// No-op: a restarted operator resyncs every WebApp; unchanged ones must not be written.
	b.op.Stop()
	if err := b.op.Start(); err != nil {
		return err
	}
	var reconciled float64
	for deadline := time.Now().Add(limit(n, time.Minute)); time.Now().Before(deadline); {
		m, err := b.op.Scrape()
		if err == nil {
			reconciled = m["controller_runtime_reconcile_total{controller=webapp}"]
			if reconciled >= float64(n+warmApps) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	noop, err := b.op.Writes()
	if err != nil {
		return err
	}
	fmt.Printf("no-op resync: %.0f reconciles, %.0f write requests\n", reconciled, noop)

	lat, err := b.latency(ctx, "bench-op")
	if err != nil {
		return err
	}
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	fmt.Printf("latency: %d spec changes, p50 %dms p99 %dms\n", len(lat), p50.Milliseconds(), p99.Milliseconds())

	ratio := op.Seconds() / bare.Seconds()
	// The goal's ratio: the operator against the floor with the WebApp
	// kind, 0 when that floor was skipped.
	crdRatio := 0.0
	if crdFloor > 0 {
		crdRatio = op.Seconds() / crdFloor.Seconds()
	}
	fmt.Println()
	fmt.Println("| measure                     | value        | goal     |")
	fmt.Println("|-----------------------------|--------------|----------|")
	fmt.Printf("| convergence, operator       | %9.2f s  |          |\n", op.Seconds())
	fmt.Printf("| convergence, bare client    | %9.2f s  |          |\n", bare.Seconds())
	if crdFloor > 0 {
		fmt.Printf("| floor with the WebApp kind  | %9.2f s  |          |\n", crdFloor.Seconds())
		fmt.Printf("| ratio operator / that floor | %9.2f    | <= 1.2   |\n", crdRatio)
	} else {
		fmt.Println("| ratio operator / that floor |   skipped    | <= 1.2   |")
	}
	fmt.Printf("| ratio operator / bare       | %9.2f    |          |\n", ratio)
	fmt.Printf("| writes in a no-op resync    | %9.0f    | 0        |\n", noop)
	fmt.Printf("| heap bytes per WebApp       | %9.0f    | <= 6144  |\n", perObject)
	fmt.Printf("|   same, from an empty heap  | %9.0f    |          |\n", (heap1-heapEmpty)/float64(n))
	fmt.Printf("|   of which live objects     | %9.0f    |          |\n", livePerObject)
	fmt.Printf("| spec-to-status p50          | %9d ms |          |\n", p50.Milliseconds())
	fmt.Printf("| spec-to-status p99          | %9d ms | < 500 ms |\n", p99.Milliseconds())
	fmt.Println(strings.Repeat("-", 58))
	// A skipped floor prints n/a, not a ratio of 0 a reader could take for one.
	floorS, crdRatioS := "n/a", "n/a"
	if crdFloor > 0 {
		floorS, crdRatioS = fmt.Sprintf("%.2f", crdFloor.Seconds()), fmt.Sprintf("%.2f", crdRatio)
	}
	fmt.Printf("BENCH webapp n=%d operator_s=%.2f bare_s=%.2f ratio=%.2f crd_floor_s=%s crd_ratio=%s noop_writes=%.0f bytes_per_object=%.0f live_bytes_per_object=%.0f p99_ms=%d\n",
		n, op.Seconds(), bare.Seconds(), ratio, floorS, crdRatioS, noop, perObject, livePerObject, p99.Milliseconds())
	return nil
}
