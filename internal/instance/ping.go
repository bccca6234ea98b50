package instance

import (
	"context"
	"sync"
	"time"
)

// pingFresh is how long a ping's answer stands for the probes that follow:
// the kubelet probes every second, so anything that asks more often is
// answered from the last ping.
const pingFresh = 500 * time.Millisecond

// pinger asks postgres whether it answers for the readiness probe, which
// anyone who reaches the pod may call: one check at a time and at most one
// per pingFresh, so a flood of probes costs postgres one connection, not
// one per request (each takes a superuser slot).
type pinger struct {
	mu    sync.Mutex
	at    time.Time
	ok    bool
	check func(context.Context) bool
}

// answer is the last check's answer if it is fresh, else a new check's.
// Callers that arrive during a check wait for it (bounded by their ctx).
func (p *pinger) answer(ctx context.Context) bool {
	for !p.mu.TryLock() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer p.mu.Unlock()
	if time.Since(p.at) < pingFresh {
		return p.ok
	}
	p.ok = p.check(ctx)
	p.at = time.Now()
	return p.ok
}
