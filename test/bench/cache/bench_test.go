//go:build bench

// Package cache measures what the operator's informer cache costs in a
// cluster full of objects that are not daytwo's: Secrets and ConfigMaps of
// other applications must cost it (almost) nothing.
package cache

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestBenchCache starts the operator once in an empty cluster (the floor)
// and once with BENCH_OBJECTS unrelated Secrets and ConfigMaps of
// BENCH_BYTES each, and prints the operator's heap in both.
func TestBenchCache(t *testing.T) {
	n, size := envInt("BENCH_OBJECTS", 1000), envInt("BENCH_BYTES", 16384)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()

	floor := heapWithOperator(t, env, "floor")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", size)
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("app-%04d", i)
		if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			StringData: map[string]string{"token": payload}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Data: map[string]string{"config": payload}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("created %d Secrets and %d ConfigMaps of %d bytes in %s", n, n, size, time.Since(start).Round(time.Millisecond))
	loaded := heapWithOperator(t, env, "loaded")
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("operator heap: %.1f MB with an empty cluster, %.1f MB with %d unrelated Secrets and ConfigMaps (%.1f MB of data)\n",
		mb(floor), mb(loaded), n, float64(2*n*size)/(1<<20))
	fmt.Printf("BENCH cache objects=%d bytes=%d heap_floor_mb=%.1f heap_mb=%.1f ratio=%.2f\n",
		n, size, mb(floor), mb(loaded), float64(loaded)/float64(floor))
}

// heapWithOperator starts an operator, lets every controller's caches fill
// (a Database reconciled to a status means the Database controller's
// informers, Secrets and ConfigMaps included, have synced), measures the
// live heap after a GC, and stops the operator.
func heapWithOperator(t *testing.T, env *testenv.Env, what string) uint64 {
	t.Helper()
	ctx := context.Background()
	stop, err := env.StartOperator(operator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + what}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "probe"}, Spec: v1alpha1.DatabaseSpec{Version: "15"}}
	if err := env.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(db), db); err == nil && db.Status.ObservedGeneration > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probe Database was never reconciled (%s)", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
