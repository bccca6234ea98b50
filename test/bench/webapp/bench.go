package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
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

// latency changes BENCH_RATE specs a second for the configured duration and
// returns each change's time from write to status observed.
func (b *bench) latency(ctx context.Context, ns string) ([]time.Duration, error) {
	// From now on, not from every WebApp as added: at N=10,000 that first
	// burst got the watch ended by the API server, and 419 of 600 changes
	// went unobserved.
	w, err := watchFrom(ctx, b.c, &v1alpha1.WebAppList{}, client.InNamespace(ns))
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

// opRun is one convergence run of the operator, with the heap readings
// and metrics the last round's measures start from.
type opRun struct {
	took                                     time.Duration
	m0                                       map[string]float64
	heapEmpty, liveEmpty, heapWarm, liveWarm float64
}

// operatorRun starts the operator on a fresh cluster, warms it (warmHeap)
// and times its convergence on N new WebApps. The last round's operator
// is left running; the others are stopped.
func (b *bench) operatorRun(ctx context.Context, last bool) (opRun, error) {
	var res opRun
	// The operator gets a cluster as empty as the bare client had: on the
	// same one it would pay for the bare client's objects (a Service's
	// cluster IP allocation, for one, scans every allocated address).
	if err := b.freshCluster(ctx); err != nil {
		return res, err
	}
	if err := kwokop.Namespace(ctx, b.c, "bench-op"); err != nil {
		return res, err
	}
	if err := b.op.Start(); err != nil {
		return res, err
	}
	if !last {
		defer b.op.Stop()
	}
	time.Sleep(2 * time.Second)
	var err error
	if res.m0, err = b.op.Scrape(); err != nil {
		return res, err
	}
	if res.heapEmpty, res.liveEmpty, res.heapWarm, res.liveWarm, err = b.warmHeap(ctx); err != nil {
		return res, err
	}

	w2, err := b.serverWrites(ctx)
	if err != nil {
		return res, err
	}
	cpu0, err := b.op.Scrape()
	if err != nil {
		return res, err
	}
	waitConverged, err := b.watchConvergence(ctx, "bench-op", b.cfg.n)
	if err != nil {
		return res, err
	}
	profiled := kwokop.CPUProfile(ctx, b.raw, b.op, "operator", b.cfg.profileSeconds)
	procs0 := kwokop.ProcessCPU()
	start := time.Now()
	if err := kwokop.Parallel(b.cfg.n, b.cfg.parallel, func(i int) error { return b.c.Create(ctx, benchApp("bench-op", i)) }); err != nil {
		return res, fmt.Errorf("create WebApps: %w", err)
	}
	at, err := waitConverged(limit(b.cfg.n, 10*time.Minute))
	if err != nil {
		return res, err
	}
	res.took = at.Sub(start)
	procs1 := kwokop.ProcessCPU()
	w3, err := b.serverWrites(ctx)
	if err != nil {
		return res, err
	}
	cpu1, cpuErr := b.op.Scrape()
	profiled() // after the readings: a profile may outlast the run
	fmt.Printf("operator:    %d WebApps converged in %.2fs\n", b.cfg.n, res.took.Seconds())
	printWrites("the operator's run", w2, w3, b.cfg.n)
	kwokop.PrintProcessCPU("the operator's run", procs0, procs1)
	if cpuErr == nil {
		used := cpu1["process_cpu_seconds_total"] - cpu0["process_cpu_seconds_total"]
		const reconciles, requests = "controller_runtime_reconcile_total{controller=webapp}", "rest_client_requests_total"
		fmt.Printf("operator CPU during its run: %.1f s (%.0f%% of one core); per WebApp %.2f reconciles, %.2f requests to the API server\n",
			used, 100*used/res.took.Seconds(), (cpu1[reconciles]-cpu0[reconciles])/float64(b.cfg.n), (cpu1[requests]-cpu0[requests])/float64(b.cfg.n))
	}
	return res, nil
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
	defer b.op.Stop() // the last round's, which goes on below
	var rounds []round
	for r := range b.cfg.rounds {
		var rd round
		if b.cfg.crdFloor {
			if rd.creates, err = b.floorRun(ctx, createsFloor); err != nil {
				return err
			}
			if b.cfg.protocolFloor {
				if rd.protocol, err = b.floorRun(ctx, protocolFloor); err != nil {
					return err
				}
			}
		}
		// The last round's operator goes on to the measures below.
		if rd.op, err = b.operatorRun(ctx, r == b.cfg.rounds-1); err != nil {
			return err
		}
		if b.cfg.rounds > 1 {
			fmt.Printf("round %d of %d: crd_ratio %s, protocol_ratio %s\n", r+1, b.cfg.rounds,
				floatText(ratio(rd.op.took, rd.creates)), floatText(ratio(rd.op.took, rd.protocol)))
		}
		rounds = append(rounds, rd)
	}
	last := rounds[len(rounds)-1].op
	m0, heapEmpty, liveEmpty, heap0, live0 := last.m0, last.heapEmpty, last.liveEmpty, last.heapWarm, last.liveWarm
	// Each figure is the median of the rounds', and each ratio the median
	// of the rounds' own ratios, each against its round's floor.
	op := median(rounds, func(rd round) time.Duration { return rd.op.took })
	crdFloor := median(rounds, func(rd round) time.Duration { return rd.creates })
	protoFloor := median(rounds, func(rd round) time.Duration { return rd.protocol })
	crdRatio := medianRatio(rounds, func(rd round) time.Duration { return rd.creates })
	protoRatio := medianRatio(rounds, func(rd round) time.Duration { return rd.protocol })

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

	bareRatio := op.Seconds() / bare.Seconds()
	fmt.Println()
	if len(rounds) > 1 {
		fmt.Printf("Medians of %d rounds; each ratio is the median of the rounds' own, not the quotient of two medians.\n", len(rounds))
	}
	fmt.Println("| measure                     | value        | goal     |")
	fmt.Println("|-----------------------------|--------------|----------|")
	fmt.Printf("| convergence, operator       | %9.2f s  |          |\n", op.Seconds())
	fmt.Printf("| convergence, bare client    | %9.2f s  |          |\n", bare.Seconds())
	if crdFloor > 0 {
		fmt.Printf("| floor with the WebApp kind  | %9.2f s  |          |\n", crdFloor.Seconds())
		fmt.Printf("| ratio operator / that floor | %9.2f    | <= 1.2   |\n", crdRatio)
		if protoFloor > 0 {
			fmt.Printf("| protocol floor              | %9.2f s  |          |\n", protoFloor.Seconds())
			fmt.Printf("| ratio operator / protocol   | %9.2f    |          |\n", protoRatio)
		}
	} else {
		fmt.Println("| ratio operator / that floor |   skipped    | <= 1.2   |")
	}
	fmt.Printf("| ratio operator / bare       | %9.2f    |          |\n", bareRatio)
	fmt.Printf("| writes in a no-op resync    | %9.0f    | 0        |\n", noop)
	fmt.Printf("| heap bytes per WebApp       | %9.0f    | <= 6144  |\n", perObject)
	fmt.Printf("|   same, from an empty heap  | %9.0f    |          |\n", (heap1-heapEmpty)/float64(n))
	fmt.Printf("|   of which live objects     | %9.0f    |          |\n", livePerObject)
	fmt.Printf("| spec-to-status p50          | %9d ms |          |\n", p50.Milliseconds())
	fmt.Printf("| spec-to-status p99          | %9d ms | < 500 ms |\n", p99.Milliseconds())
	fmt.Println(strings.Repeat("-", 58))
	fmt.Printf("BENCH webapp n=%d rounds=%d operator_s=%.2f bare_s=%.2f ratio=%.2f crd_floor_s=%s crd_ratio=%s protocol_floor_s=%s protocol_ratio=%s noop_writes=%.0f bytes_per_object=%.0f live_bytes_per_object=%.0f p99_ms=%d\n",
		n, len(rounds), op.Seconds(), bare.Seconds(), bareRatio, secondsText(crdFloor), floatText(crdRatio), secondsText(protoFloor), floatText(protoRatio),
		noop, perObject, livePerObject, p99.Milliseconds())
	return nil
}
