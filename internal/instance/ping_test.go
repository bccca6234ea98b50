package instance

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A flood of readiness probes opens one connection to postgres, not one per
// probe: anyone who reaches the pod may call /readyz.
func TestReadinessProbesShareOnePing(t *testing.T) {
	t.Parallel()
	var checks atomic.Int32
	p := &pinger{check: func(context.Context) bool {
		checks.Add(1)
		time.Sleep(50 * time.Millisecond) // a connection's cost
		return true
	}}
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if !p.answer(context.Background()) {
				t.Error("a probe was answered not ready")
			}
		})
	}
	wg.Wait()
	if n := checks.Load(); n != 1 {
		t.Fatalf("200 concurrent probes pinged postgres %d times, want 1", n)
	}
	p.at = time.Now().Add(-pingFresh)
	p.answer(context.Background())
	if n := checks.Load(); n != 2 {
		t.Fatalf("a probe after the answer went stale pinged %d times in all, want 2", n)
	}
}
