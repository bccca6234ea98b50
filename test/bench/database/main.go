// Command database is the Database benchmark at scale (`make
// bench-database`). Against the kwok cluster named by KUBECONFIG, with the
// operator binary DAYTWO_BIN run as in production, it creates N Databases
// (of one instance: kwok runs no PostgreSQL, so each stays without a ready
// primary, polled as a real one would be) and measures:
//
//   - memory: the operator's heap per Database, from a warm heap (after a
//     few Databases, as bench-webapp does);
//   - no-op cost: the writes a restarted operator sends while it resyncs
//     all N unchanged Databases (goal 0);
//   - reconcile latency: the p99 of the Database controller's reconciles
//     while the N are created, from controller-runtime's histogram;
//   - requests at rest: the operator's API requests per Database per
//     minute once every Database has settled, at N/2 and at N; their ratio
//     says whether the cost grows linearly (about 1) or faster.
//
// The last line is machine-readable. It is a benchmark, not a test: it
// prints figures and fails only when something does not work at all.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/test/bench/kwokop"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "bench-database:", err)
		os.Exit(1)
	}
}

// warm is how many Databases the operator runs before its heap is first
// measured: what the first ones bring once (type caches, informers' first
// objects) is the operator's fixed heap, not a Database's.
const warm = 5

type bench struct {
	c        client.Client
	op       *kwokop.Operator
	n, p     int
	restTime time.Duration
}

func run(ctx context.Context) error {
	bin := os.Getenv("DAYTWO_BIN")
	if bin == "" {
		return errors.New("DAYTWO_BIN is not set: run `make bench-database`")
	}
	// Served before the operator starts: its controllers look the kinds up once.
	if err := kwokop.CRDsEstablished(ctx, time.Minute); err != nil {
		return err
	}
	c, _, err := kwokop.Clients()
	if err != nil {
		return err
	}
	b := &bench{c: c, n: kwokop.EnvInt("BENCH_N", 500), p: kwokop.EnvInt("BENCH_PARALLEL", 16),
		restTime: wholePeriods(time.Duration(kwokop.EnvInt("BENCH_REST_SECONDS", 60)) * time.Second)}
	b.op = &kwokop.Operator{Bin: bin, Name: "bench-database", Parallel: 4}
	fmt.Printf("bench-database: N=%d, created %d at a time, requests at rest over %s\n", b.n, b.p, b.restTime)
	for _, ns := range []string{"bench-warm", "bench-db"} {
		if err := kwokop.Namespace(ctx, c, ns); err != nil {
			return err
		}
	}
	if err := b.op.Start(); err != nil {
		return err
	}
	defer func() { b.op.Stop() }()
	return b.run(ctx)
}

func (b *bench) run(ctx context.Context) error {
	heapEmpty, _, err := b.op.Heap()
	if err != nil {
		return err
	}
	if err := b.create(ctx, "bench-warm", 0, warm); err != nil {
		return err
	}
	heapWarm, liveWarm, err := b.op.Heap()
	if err != nil {
		return err
	}

	half := b.n / 2
	if err := b.create(ctx, "bench-db", 0, half); err != nil {
		return err
	}
	restHalf, err := b.atRest(warm + half)
	if err != nil {
		return err
	}
	before, err := b.op.Histogram("controller_runtime_reconcile_time_seconds", "controller", "database")
	if err != nil {
		return err
	}
	start := time.Now()
	if err := b.create(ctx, "bench-db", half, b.n); err != nil {
		return err
	}
	fmt.Printf("created and settled %d Databases in %.1fs\n", b.n-half, time.Since(start).Seconds())
	if err := b.quiet(); err != nil {
		return err
	}
	// The reconciles of the second half's creation, to the last one it
	// caused.
	after, err := b.op.Histogram("controller_runtime_reconcile_time_seconds", "controller", "database")
	if err != nil {
		return err
	}
	p99 := after.Quantile(before, 0.99)
	heap1, live1, err := b.op.MeasuredHeap()
	if err != nil {
		return err
	}
	perObject, livePerObject := (heap1-heapWarm)/float64(b.n), (live1-liveWarm)/float64(b.n)
	fmt.Printf("memory: heap in use after GC %.1f -> (%d warm-up Databases) %.1f -> %.1f MiB; %.0f bytes per Database (%.0f live)\n",
		heapEmpty/(1<<20), warm, heapWarm/(1<<20), heap1/(1<<20), perObject, livePerObject)
	rest, err := b.atRest(warm + b.n)
	if err != nil {
		return err
	}

	// A restarted operator resyncs every Database; unchanged ones must not
	// be written.
	b.op.Stop()
	if err := b.op.Start(); err != nil {
		return err
	}
	reconciled, err := b.resynced(warm + b.n)
	if err != nil {
		return err
	}
	noop, err := b.op.Writes()
	if err != nil {
		return err
	}
	fmt.Printf("no-op resync: %.0f reconciles, %.0f write requests\n", reconciled, noop)

	// Nothing at rest at either size is linear too (0 = 0 x N).
	linearity := 1.0
	if restHalf > 0 || rest > 0 {
		linearity = rest / restHalf
	}
	fmt.Println()
	fmt.Println("| measure                              | value      | goal      |")
	fmt.Println("|--------------------------------------|------------|-----------|")
	fmt.Printf("| writes in a no-op resync             | %8.0f   | 0         |\n", noop)
	fmt.Printf("| heap bytes per Database              | %8.0f   | <= 16384  |\n", perObject)
	fmt.Printf("| reconcile p99 (bucket bound)         | %8.0f ms |           |\n", p99*1000)
	fmt.Printf("| API requests / Database / min, N/2   | %8.2f   |           |\n", restHalf)
	fmt.Printf("| API requests / Database / min, N     | %8.2f   | linear    |\n", rest)
	fmt.Printf("| ratio N / N/2 (1 is linear)          | %8.2f   | ~1        |\n", linearity)
	fmt.Println(strings.Repeat("-", 66))
	fmt.Printf("BENCH database n=%d noop_writes=%.0f bytes_per_object=%.0f live_bytes_per_object=%.0f reconcile_p99_ms=%.0f requests_per_min_at_rest=%.2f rest_linearity=%.2f\n",
		b.n, noop, perObject, livePerObject, p99*1000, rest, linearity)
	return nil
}

// create creates Databases [from, to) in ns and waits until each has
// settled: its status describes its generation and its StatefulSet exists.
func (b *bench) create(ctx context.Context, ns string, from, to int) error {
	err := kwokop.Parallel(to-from, b.p, func(i int) error {
		name := fmt.Sprintf("db-%04d", from+i)
		// kwok has no storage provisioner: a volume bound to the
		// instance's claim, so its pod is scheduled and "runs" (an IP,
		// no PostgreSQL), and the operator polls it as it would a real one.
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + ns + "-" + name}},
				ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: "pgdata-" + name + "-0"},
			}}
		return cmp.Or(b.c.Create(ctx, pv), b.c.Create(ctx, &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.DatabaseSpec{Version: "17", Instances: ptr.To[int32](1)}}))
	})
	if err != nil {
		return fmt.Errorf("create Databases: %w", err)
	}
	limit := max(2*time.Minute, time.Duration(to-from)*time.Second)
	for deadline := time.Now().Add(limit); ; {
		settled, err := b.settled(ctx, ns)
		if err != nil {
			return err
		}
		if settled >= to {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Databases in %s settled after %s", settled, to, ns, limit)
		}
		time.Sleep(time.Second)
	}
}

// settled counts the Databases of ns whose status describes their
// generation and carries a Ready condition.
func (b *bench) settled(ctx context.Context, ns string) (int, error) {
	list := &v1alpha1.DatabaseList{}
	if err := b.c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, d := range list.Items {
		if d.Status.ObservedGeneration == d.Generation && meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionReady) != nil {
			n++
		}
	}
	return n, nil
}

// wholePeriods rounds d up to whole periods of a Database at rest
// (database.InstanceRefresh): a window of a period and a half counts the
// Databases whose poll falls in it twice and the others once, and
// Databases made together poll together.
func wholePeriods(d time.Duration) time.Duration {
	p := database.InstanceRefresh
	periods := max(1, int64((d+p-1)/p))
	return time.Duration(periods) * p
}

// atRest is the operator's requests per Database per minute over
// restTime, with nothing changing (status polls of the instances, and
// what requeues send the API server).
func (b *bench) atRest(dbs int) (float64, error) {
	if err := b.quiet(); err != nil {
		return 0, err
	}
	api0, inst0, err := b.op.Requests()
	if err != nil {
		return 0, err
	}
	time.Sleep(b.restTime)
	api1, inst1, err := b.op.Requests()
	if err != nil {
		return 0, err
	}
	perMin := (api1 - api0 + inst1 - inst0) / float64(dbs) / b.restTime.Minutes()
	fmt.Printf("at rest with %d Databases: %.0f API server and %.0f instance API requests in %s, %.2f per Database per minute\n",
		dbs, api1-api0, inst1-inst0, b.restTime, perMin)
	return perMin, nil
}

// resynced waits until the restarted operator has reconciled every
// Database (successfully: retries and errors are not a resync) and then
// gone quiet, so the writes counted are all the resync's.
func (b *bench) resynced(dbs int) (float64, error) {
	var reconciled float64
	for deadline := time.Now().Add(b.limit(dbs)); ; {
		m, err := b.op.Scrape()
		if err == nil {
			// Every result but an error: a reconcile that asks to be
			// called again (requeue_after) has done its work too.
			reconciled = m["controller_runtime_reconcile_total{controller=database}"] - m["controller_runtime_reconcile_total{result=error}"]
			if reconciled >= float64(dbs) {
				break
			}
		}
		if time.Now().After(deadline) {
			return reconciled, fmt.Errorf("the restarted operator reconciled %.0f of %d Databases", reconciled, dbs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return reconciled, b.quiet()
}

// quiet waits until the Database controller has run no reconcile for 5
// seconds: the work a creation or a restart caused is done.
func (b *bench) quiet() error {
	last, since := -1.0, time.Now()
	for deadline := time.Now().Add(b.limit(b.n + warm)); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		m, err := b.op.Scrape()
		if err != nil {
			return err
		}
		if n := m["controller_runtime_reconcile_total{controller=database}"]; n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 5*time.Second {
			return nil
		}
	}
	return errors.New("the Database controller never went quiet: it reconciles without end")
}

// limit bounds a wait over dbs Databases: a reconcile can take a second
// (a poll of an instance that never answers), 4 at a time.
func (b *bench) limit(dbs int) time.Duration {
	return max(2*time.Minute, time.Duration(dbs)*time.Second/2)
}
