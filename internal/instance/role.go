package instance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// learnRole asks the primary lease who the primary is, waiting while the
// Kubernetes API does not answer: an instance that does not know its role
// must not start postgres at all.
func (m *Manager) learnRole(ctx context.Context) error {
	if m.lease == nil {
		return nil
	}
	for {
		v, err := m.lease.View(ctx)
		holder := v.Holder
		if err == nil && holder != "" {
			role := instanceapi.RoleReplica
			if holder == m.cfg.Pod {
				role = instanceapi.RolePrimary
			}
			m.setRole(role)
			m.shared.mu.Lock()
			m.shared.holder = holder
			m.shared.mu.Unlock()
			if role == instanceapi.RolePrimary && !m.mayStartAsPrimary(ctx, v) {
				if !sleepCtx(ctx, time.Second) {
					return ctx.Err()
				}
				continue
			}
			m.log.Info("Role from the primary lease", "role", role, "holder", holder)
			return nil
		}
		msg := "waiting for the primary lease to name a holder"
		if err != nil {
			msg = "waiting for the Kubernetes API to read the primary lease: " + err.Error()
		}
		m.setMessage(msg)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// mayStartAsPrimary says whether postgres may start as the primary the
// lease view v names, extending the lease first when less than a renewal
// period of its term is left; when not, it says why (setMessage), and
// learnRole reads the lease again. The term counts from the last renewal,
// whoever made it, not from this read. After a start that ran out of
// restartLeaseLimit before it served (a long crash recovery or replay),
// the lease lapses for a whole term first, so failover may promote
// another; only if none is promoted does this instance start again, then
// with no limit (killing a recovery only starts it over).
func (m *Manager) mayStartAsPrimary(ctx context.Context, v LeaseView) bool {
	m.shared.mu.Lock()
	m.shared.leaseUntil = later(m.shared.leaseUntil, v.validUntil())
	until := m.shared.leaseUntil
	forFailover := m.shared.startFenced && time.Now().Before(until.Add(instanceapi.LeaseFenceMargin+m.leaseTerm()))
	if m.shared.startFenced && !forFailover {
		m.shared.startFenced, m.shared.startUnbounded = false, true
	}
	m.shared.mu.Unlock()
	if forFailover {
		m.setMessage("the last start took too long; waiting a lease term for failover before starting again")
		return false
	}
	if by := m.supersededBy(); by != "" {
		m.setMessage(by + " was promoted from this Database's WAL archive: this instance does not start as its primary")
		m.releaseSuperseded(ctx)
		return false
	}
	if err := m.promise.claim(m.cfg.Pod, v.ReleasedBy, v.HandoverLSN != "", time.Now()); err != nil {
		m.setMessage("waiting to start as the primary: " + err.Error())
		return false
	}
	if time.Until(until) >= instanceapi.LeaseRenewPeriod {
		return true
	}
	if err := m.extendBefore(ctx, instanceapi.LeaseRenewPeriod); err != nil {
		m.setMessage("waiting for the Kubernetes API to extend the primary lease: " + err.Error())
		return false
	}
	return true
}

// rejoin turns data that last ran as a primary into a replica of the
// current primary: pg_rewind undoes what it wrote after the two diverged,
// and when that fails the replica is cloned again. Data that already ran as
// a replica follows the new timeline by itself, unless it replayed past the
// fork (rewindMark, see errDiverged).
func (m *Manager) rejoin(ctx context.Context) error {
	if m.role() != instanceapi.RoleReplica || m.sup.bootstrapped {
		return nil
	}
	if _, err := os.Stat(filepath.Join(m.cfg.PGData, "standby.signal")); err == nil && !m.marked(rewindMark) {
		return nil
	}
	if following(m.holderName()) {
		// A demoted primary: it stopped cleanly where the source took
		// over (the demotion token), so its data continues onto the
		// source's timeline from its archive, and there is no server to
		// rewind against.
		return nil
	}
	if err := m.cfg.writePassFile(); err != nil {
		return err
	}
	host, port := m.upstream()
	m.setMessage("rewinding the data to follow " + host)
	source := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres passfile=%s connect_timeout=5",
		host, port, replicationUser, m.cfg.passFile()) + m.cfg.sslParams()
	// Without a checkpoint a just-promoted source still shows the old
	// timeline in its control file, and pg_rewind would find nothing to
	// undo. Until the primary answers, wait, as a clone would.
	for {
		err := checkpoint(ctx, source, true)
		if err == nil {
			break
		}
		m.setMessage("waiting for the primary " + host + " to rewind: " + err.Error())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	if err := os.WriteFile(m.cfg.rewinding(), []byte("pg_rewind started\n"), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", m.cfg.rewinding(), err)
	}
	rewind := exec.CommandContext(ctx, m.cfg.bin("pg_rewind"), "--target-pgdata="+m.cfg.PGData, "--source-server="+source)
	rewind.Env = append(os.Environ(), m.cfg.sslEnv()...)
	out, err := rewind.CombinedOutput()
	if err == nil {
		m.log.Info("Rewound the data to follow the primary", "output", postgres.LastLines(out, 2))
		if err := os.Remove(m.cfg.rewinding()); err != nil {
			return fmt.Errorf("failed to remove %s: %w", m.cfg.rewinding(), err)
		}
		if err := os.Remove(filepath.Join(m.cfg.PGData, rewindMark)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("failed to remove %s: %w", rewindMark, err)
		}
		return nil
	}
	m.log.Info("Cloning the primary again: pg_rewind could not rejoin this data", "output", postgres.LastLines(out, 2))
	return m.bootstrap(ctx)
}
