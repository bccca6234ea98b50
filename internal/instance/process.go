package instance

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// supervise starts postgres and runs until it exits or ctx ends.
func (m *Manager) supervise(ctx context.Context) error {
	m.shared.mu.Lock()
	f := m.shared.forwarding
	m.shared.mu.Unlock()
	if f != nil {
		// Postgres needs the port back. Under required durability, when
		// the new primary may wait for this instance to commit, it gets it
		// at once; otherwise once the relay's window ended: until then
		// kube-proxy may still send -rw's connections here, and a replica
		// would answer them read-only. Rejoining that late is safe: a
		// replica behind a lowered setting starts anyway (floors.go).
		if r, err := m.cfg.replication(); err == nil && r.Required && len(r.Instances)-2 < r.Synchronous {
			f.close()
		}
		f.wait(ctx)
		m.shared.mu.Lock()
		m.shared.forwarding = nil
		m.shared.mu.Unlock()
	}
	// Read before the start: a file that changes meanwhile then costs the
	// operator one more restart in place, never a setting thought applied.
	startHash := m.parametersHash()
	m.shared.mu.Lock()
	m.shared.status.StartConfigHash = startHash
	m.sup.startHolder = m.shared.holder
	m.shared.mu.Unlock()
	if err := m.extendIfShort(ctx); err != nil {
		return err
	}
	if m.fencedOnRequest() {
		// Asked while this start was prepared: postgres does not start.
		return fmt.Errorf("%w: %w", errFenced, errFencedOnRequest)
	}
	if err := m.logs.startPipes(filepath.Join(m.cfg.RunDir, logDirName)); err != nil {
		return err
	}
	stderr, err := m.logs.stderr()
	if err != nil {
		return err
	}
	cmd := exec.Command(m.cfg.bin("postgres"), append([]string{"-D", m.cfg.PGData}, m.cfg.collectorArgs()...)...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	m.log.Info("Starting postgres", "role", m.role())
	// Its own process group: a signal to the manager is not also delivered
	// to postgres by a terminal; the manager decides what postgres gets.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = stderr.Close() // postgres holds it now; the relay ends when it does
	if err != nil {
		return fmt.Errorf("failed to start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	runCtx, cancel := context.WithCancel(ctx)
	monitored := make(chan struct{})
	fence := make(chan error, 1)
	m.shared.mu.Lock()
	m.shared.run, m.shared.runFence = runCtx, fence //nolint:fatcontext // held to cancel, not to pass down (see shared)
	if m.shared.status.FencedOnRequest {
		// Asked between the check above and now: under the same lock as
		// the request, so one of the two sees the other.
		fence <- errFencedOnRequest
	}
	m.shared.mu.Unlock()
	defer func() {
		m.shared.mu.Lock()
		if m.shared.runFence == fence {
			m.shared.runFence = nil
		}
		m.shared.mu.Unlock()
	}()
	// Armed before the server can take a write, whether or not this run
	// ever renews.
	m.guardLease(runCtx, fence)
	st := m.sup.nextMonitor(monitored, m.log)
	go func() {
		defer close(monitored)
		m.monitor(runCtx, fence, st)
	}()
	// The monitor ends, and is waited for, before supervise returns: Run
	// marks the next start Starting, which a last observation of this
	// run's server would turn to Running. The wait is bounded, as
	// everything the monitor does honours runCtx. The paths that stop
	// postgres cancel it first, so that the shutdown is not delayed.
	defer func() {
		cancel()
		select {
		case <-monitored:
		case <-time.After(2 * time.Second):
			m.log.Info("The monitor did not stop within 2 s; going on without it")
		}
	}()
	fenced := func(err error) error {
		if errors.Is(err, errFencedOnRequest) {
			// Asked for: a clean shutdown, and a primary releases its
			// lease with its last checkpoint, as at a pod's deletion.
			m.log.Info("Stopping postgres: fenced on request")
			cancel() // the heartbeat and its renewals stop with the server
			if err := m.shutdown(cmd, exited); err != nil {
				return err
			}
			m.releaseLease()
			return fmt.Errorf("%w: %w", errFenced, err)
		}
		if errors.Is(err, errDiverged) {
			// pg_rewind wants a replica shut down cleanly.
			m.log.Info("Stopping postgres to rewind it", "reason", err.Error())
			if err := m.shutdown(cmd, exited); err != nil {
				return err
			}
			return fmt.Errorf("%w: %w", errFenced, err)
		}
		// No checkpoint, no goodbye: the lease may be someone else's by
		// now, or the replica's data is to be replaced.
		m.log.Info("Killing postgres", "reason", err.Error())
		killServer(cmd.Process.Pid)
		<-exited
		return fmt.Errorf("%w: %w", errFenced, err)
	}

	select {
	case err := <-exited:
		return fmt.Errorf("%w: %v", errCrashed, err) //nolint:errorlint // errCrashed alone decides what the caller does
	case err := <-fence:
		return fenced(err)
	case <-m.restartReq:
		// A fence that fired meanwhile wins: the lease may be gone, or the
		// data is to be repaired.
		select {
		case err := <-fence:
			return fenced(err)
		default:
		}
		// Ready throughout on a primary, within its lease (restartingInPlace).
		m.shared.mu.Lock()
		m.shared.restarting = true
		sync := m.shared.syncRecorded
		m.shared.mu.Unlock()
		m.log.Info("Restarting postgres in place, as asked")
		cancel() // the heartbeat and its renewals stop with the server
		if err := m.shutdown(cmd, exited); err != nil {
			return err
		}
		if lsn, err := m.shutdownCheckpoint(); err == nil && m.role() == instanceapi.RolePrimary {
			go m.keepLeaseWhileRestarting(ctx, lsn, sync)
		}
		return errRestartRequested
	case d := <-m.demote:
		// The heartbeat and the renewals stop first: the lease is handed over, not renewed.
		cancel()
		return m.switchOver(d, func() error { return m.shutdown(cmd, exited) })
	case <-ctx.Done():
		err := m.shutdown(cmd, exited)
		// A lease not released runs out after the relay's window: nothing
		// to relay to, and the pod must not look ready meanwhile.
		if m.role() == instanceapi.RolePrimary && m.lease != nil && m.releaseLease() {
			m.relayToNextPrimary()
		}
		return err
	}
}

// shutdown asks for a fast shutdown (SIGINT: abort transactions, checkpoint)
// and falls back to an immediate one (SIGQUIT) when it overruns.
func (m *Manager) shutdown(cmd *exec.Cmd, exited <-chan error) error {
	m.setPhase(instanceapi.PhaseStopping, "")
	m.log.Info("Stopping postgres (fast)")
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		m.log.Info("Postgres stopped")
		return nil
	case <-time.After(m.cfg.ShutdownTimeout):
	}
	m.log.Info("Fast shutdown overran; stopping postgres immediately", "timeout", m.cfg.ShutdownTimeout)
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	<-exited
	return nil
}

// stopToRepair stops postgres on a replica that cannot follow the primary
// (errWALGone, errDiverged), marking the data first so that the next start
// repairs it even if this manager dies in between.
func (m *Manager) stopToRepair(why error, stop chan<- error) {
	mark := recloneMark
	if errors.Is(why, errDiverged) {
		mark = rewindMark
	}
	if err := m.markData(mark, why); err != nil {
		m.log.Error(err, "Failed to mark the data for repair")
		return
	}
	select {
	case stop <- why:
	default:
	}
}
