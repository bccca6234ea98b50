//go:build e2e

package framework

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The real node's CPU that suites may request, shared between the suites
// that run in parallel: the node has 2 CPUs, and the scheduler places a
// pod only where its requests fit, whatever the CPUs actually do.
var cpu struct {
	mu   sync.Mutex
	sem  *semaphore.Weighted
	free int64 // millicores, when the first suite asked
}

// minFree is the least capacity ReserveCPU assumes, so that suites still
// run one after another when the node looks full (pods of a suite before
// still terminating) rather than not at all.
const minFree = 1000

// ReserveCPU holds milli millicores of the real node's allocatable CPU for
// the suite t, whose namespace is ns, until it ends and the pods of ns are
// gone: a suite that runs in parallel reserves, before it creates anything,
// what its pods request at their peak (a small instance 250m, a medium one
// 500m, a backup Job 100m, a WebApp pod 100m). Without it, parallel suites'
// pods would wait Pending for each other's CPU and time out. It waits for
// the CPU, and does nothing on kwok nodes.
func (c *Cluster) ReserveCPU(t *testing.T, ns string, milli int64) {
	t.Helper()
	if c.Mode != ModeReal {
		return
	}
	sem, free := c.cpuSemaphore(t)
	milli = min(milli, free)
	start := time.Now()
	if err := sem.Acquire(context.Background(), milli); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for %dm of the node's CPU", waited.Round(time.Second), milli)
	}
	// Cleanups run last in, first out: this one before the namespace's
	// deletion, whose pods take their grace period to go. The CPU is
	// released once they have, or after 3 minutes (a namespace the
	// namespaced install keeps).
	t.Cleanup(func() {
		go func() {
			defer sem.Release(milli)
			_ = wait.PollUntilContextTimeout(context.Background(), 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
				pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				return err == nil && len(pods.Items) == 0, nil
			})
		}()
	})
}

// cpuSemaphore is the semaphore over the CPU the node had free when the
// first suite asked: its allocatable CPU less what its pods then requested
// (the control plane's add-ons, the operator, Prometheus).
func (c *Cluster) cpuSemaphore(t *testing.T) (*semaphore.Weighted, int64) {
	cpu.mu.Lock()
	defer cpu.mu.Unlock()
	if cpu.sem != nil {
		return cpu.sem, cpu.free
	}
	ctx := context.Background()
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("the node: %v", err)
	}
	free := nodes.Items[0].Status.Allocatable.Cpu().MilliValue()
	pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var containers, inits int64
		for _, ctr := range p.Spec.Containers {
			containers += ctr.Resources.Requests.Cpu().MilliValue()
		}
		for _, ctr := range p.Spec.InitContainers {
			inits = max(inits, ctr.Resources.Requests.Cpu().MilliValue())
		}
		free -= max(containers, inits)
	}
	cpu.free = max(free, minFree)
	cpu.sem = semaphore.NewWeighted(cpu.free)
	return cpu.sem, cpu.free
}
