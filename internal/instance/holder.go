package instance

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// holderName is the instance the lease named when last read or watched.
func (m *Manager) holderName() string {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	return m.shared.holder
}

// upstream is where this replica clones and streams from now.
func (m *Manager) upstream() (string, int) { return m.cfg.upstream(m.holderName()) }

// followHolder keeps a replica streaming from whichever instance the lease
// names: when the lease moves (a failover or a switchover names the next
// primary just before promoting it), the managed postgresql.conf is
// rewritten and reloaded, and the walreceiver connects to the new holder
// at once, without waiting for the -rw Service to follow. A replica the
// lease hands on to promotes itself at once (promoteNamed), with the
// handover's WAL first in a switchover.
func (m *Manager) followHolder(ctx context.Context, w HolderWatcher) {
	w.WatchHolder(ctx, func(holder string, moved bool) {
		m.apiWatch.saw(time.Now())
		m.holderIs(ctx, holder, moved)
	})
}

// holderIs acts on the lease naming holder, as watched (moved: handed on
// anew) or as read: a replica streams from it, or promotes itself when it
// is this instance and the lease was handed on to it.
func (m *Manager) holderIs(ctx context.Context, holder string, moved bool) {
	m.shared.mu.Lock()
	changed := holder != m.shared.holder
	m.shared.holder = holder
	m.shared.mu.Unlock()
	if changed {
		m.promise.forgetVouched(holder)
	}
	if !changed || m.role() != instanceapi.RoleReplica {
		return
	}
	if holder == m.cfg.Pod {
		select {
		case m.named <- struct{}{}:
		default:
		}
		if moved && m.Status().Phase == instanceapi.PhaseRunning {
			// (At a start the role comes from the lease: learnRole.)
			go m.promoteNamed(ctx)
		}
		return
	}
	m.conf.mu.Lock()
	defer m.conf.mu.Unlock()
	conf := filepath.Join(m.cfg.PGData, "postgresql.conf")
	if _, err := os.Stat(conf); err != nil {
		return // not written yet: the next start writes it for this holder
	}
	host, port := m.cfg.upstream(holder)
	if err := writeFileAtomic(conf, m.cfg.managedConf(instanceapi.RoleReplica, holder, m.conf.floors)); err != nil {
		m.log.Error(err, "Failed to point the replica at the new lease holder", "holder", holder)
		return
	}
	m.log.Info("Streaming from the new lease holder", "holder", holder, "host", host, "port", port)
	m.Reload()
}
