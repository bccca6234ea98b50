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
)

// The real node's CPU that suites may request, shared between the suites
// that run in parallel: the node has 2 CPUs, and the scheduler places a
// pod only where its requests fit, whatever the CPUs actually do.
var cpu struct {
	once sync.Once
	sem  *semaphore.Weighted
	free int64 // millicores, when the first suite asked
}

// ReserveCPU holds milli millicores of the real node's allocatable CPU
// for t until it ends: a suite that runs in parallel reserves, before it
// creates anything, what its pods request at their peak (a small instance
// 250m, a medium one 500m, a backup Job 100m, a WebApp pod 100m). Without
// it, parallel suites' pods would wait Pending for each other's CPU and
// time out. It waits for the CPU, and does nothing on kwok nodes.
func (c *Cluster) ReserveCPU(t *testing.T, milli int64) {
	t.Helper()
	if c.Mode != ModeReal {
		return
	}
	cpu.once.Do(func() { cpu.free = c.freeCPU(t); cpu.sem = semaphore.NewWeighted(cpu.free) })
	milli = min(milli, cpu.free)
	start := time.Now()
	if err := cpu.sem.Acquire(context.Background(), milli); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for %dm of the node's CPU", waited.Round(time.Second), milli)
	}
	t.Cleanup(func() { cpu.sem.Release(milli) })
}

// freeCPU is the node's allocatable CPU less what its running pods
// (the control plane's add-ons, the operator, Prometheus) request.
func (c *Cluster) freeCPU(t *testing.T) int64 {
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
		for _, ctr := range p.Spec.Containers {
			free -= ctr.Resources.Requests.Cpu().MilliValue()
		}
	}
	return free
}
