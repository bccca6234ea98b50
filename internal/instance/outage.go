package instance

import (
	"context"
	"sync"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// apiWatch is what this instance knows of its own reach to the
// Kubernetes API: when the lease watch last saw a change (a holder renews
// each LeaseRenewPeriod), and the last lease read vouching made.
type apiWatch struct {
	mu      sync.Mutex
	seen    time.Time
	checked time.Time
	// failed: the last read failed (and none runs now).
	failed, reading bool
}

func (a *apiWatch) saw(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = now
}

// reachesAPI: this instance read the lease lately. A replica promises only
// while it does not: in a control-plane outage, not when the holder alone
// is cut off from the API (the operator then fails over, as it should). It
// reads the lease itself (at most once per VouchPeriod, bounded by
// VouchReadLimit) only when the watch saw nothing for two renewal periods.
func (m *Manager) reachesAPI(ctx context.Context) bool {
	if m.lease == nil {
		return false
	}
	a := &m.apiWatch
	a.mu.Lock()
	now := time.Now()
	if now.Sub(a.seen) < 2*instanceapi.LeaseRenewPeriod {
		a.mu.Unlock()
		return true
	}
	if a.reading || now.Sub(a.checked) < instanceapi.VouchPeriod {
		// A read under way, or one a moment ago: only its failure says
		// the API is out of reach.
		failed := a.failed && !a.reading
		a.mu.Unlock()
		return !failed
	}
	a.checked, a.reading = now, true
	a.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, instanceapi.VouchReadLimit)
	defer cancel()
	_, err := m.lease.View(rctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failed, a.reading = err != nil, false
	return !a.failed
}
