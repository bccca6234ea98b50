package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// BootstrapOnly restores the primary's data from a backup when it has none,
// and returns without serving: the operator's restore init container, the
// only container given the storage credentials, so PostgreSQL and what it
// starts never see them. Data already there, and a replica, are the
// postgres container's to handle. The API answers meanwhile: the operator
// shows a recovery's progress from it.
func (m *Manager) BootstrapOnly(ctx context.Context) error {
	_, stop, err := m.serveAPI()
	if err != nil {
		return err
	}
	defer stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// restore_command only: the postgres container archives.
	if err := m.startWAL(wctx, false); err != nil {
		return err
	}
	if err := m.cfg.prepareRunDir(); err != nil {
		return err
	}
	if err := m.learnRole(ctx); err != nil {
		return err
	}
	if m.role() != instanceapi.RolePrimary {
		m.log.Info("Nothing to restore: this instance is a replica, and clones its primary")
		return nil
	}
	if err := m.finishInterruptedSwap(); err != nil {
		return err
	}
	if hasData(m.cfg.PGData) {
		m.log.Info("Nothing to restore: the data directory exists")
		return nil
	}
	if err := os.RemoveAll(m.cfg.staging()); err != nil {
		return fmt.Errorf("failed to remove an interrupted bootstrap: %w", err)
	}
	return m.bootstrap(ctx)
}

// refuseToReplaceServedData: a primary with no data (its volume lost, say)
// must not make some (initdb, the bootstrap backup, an import) once the
// Database has served, or it would serve an empty or older database as
// the latest. Not permanent: the container restarts, and clones once
// failover names another holder.
func (m *Manager) refuseToReplaceServedData(ctx context.Context) error {
	rec, ok := m.lease.(ServedRecord)
	if m.role() == instanceapi.RoleReplica || !ok {
		return nil
	}
	lsn, err := rec.ServedLSN(ctx)
	if err != nil {
		return fmt.Errorf("failed to read the primary lease: %w", err)
	}
	if lsn == "" {
		return nil
	}
	msg := fmt.Sprintf("%s: %s holds the primary lease but has no data, and the Database has served (its lease records WAL position %s): "+
		"bootstrapping here would serve an empty or older database as the latest. Failover moves the lease to a replica with the data; "+
		"with none, restore into a new Database, or delete Lease %s to bootstrap this one anew",
		instanceapi.TerminationDataConflict, m.cfg.Pod, lsn, instanceapi.LeaseName(m.cfg.Cluster))
	m.setMessage(msg)
	return errors.New(msg)
}

// permanentError marks failures a container restart cannot fix.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// prepare leaves a data directory of the right major version, made by this
// Database (or allowed to run by checkIdentity), with the managed
// configuration written.
func (m *Manager) prepare(ctx context.Context) error {
	if err := m.cfg.prepareRunDir(); err != nil {
		return err
	}
	if err := m.learnRole(ctx); err != nil {
		return err
	}
	if m.role() == instanceapi.RoleReplica {
		if err := m.reserveSlot(ctx); err != nil {
			return err
		}
	}
	if err := m.ensureData(ctx); err != nil {
		return err
	}
	if m.role() == instanceapi.RolePrimary {
		if err := m.upgradeIfOlder(ctx); err != nil {
			return err
		}
	} else if err := m.checkVersion(ctx); err != nil {
		return err
	}
	if err := m.rejoin(ctx); err != nil {
		return err
	}
	m.setPhase(instanceapi.PhaseStarting, "")
	return m.writeStartConfig(ctx)
}

// prepareInPlace readies a start right after a clean shutdown asked for
// (POST /restart, or a replica's own once it replayed its primary's lowered
// settings): the data, the binaries and the slot are what they were a
// moment ago, so only the role is read again, and a changed one gets the
// whole of prepare. Every millisecond here is one without writes on a
// primary.
func (m *Manager) prepareInPlace(ctx context.Context) error {
	// A repair asked meanwhile (a rewind, a re-clone) is prepare's.
	if m.marked(recloneMark) || m.marked(rewindMark) || fileExists(m.cfg.rewinding()) {
		return m.prepare(ctx)
	}
	role := m.role()
	if err := m.learnRole(ctx); err != nil {
		return err
	}
	// The holder postgres last started under, not the last one seen: the
	// watch moves that one while postgres runs.
	if m.role() != role || m.holderName() != m.sup.startHolder {
		return m.prepare(ctx)
	}
	m.setPhase(instanceapi.PhaseStarting, "")
	return m.writeStartConfig(ctx)
}

// ensureData bootstraps unless a complete data directory exists that is
// not marked to be cloned again (recloneMark). A
// bootstrap builds in a staging directory and renames it into place only
// once it is complete, so whatever interrupts it (SIGKILL, OOM, node loss)
// leaves a staging directory, which the next start throws away, and never
// a half-made data directory that would be served.
func (m *Manager) ensureData(ctx context.Context) error {
	if err := os.RemoveAll(m.cfg.staging()); err != nil {
		return fmt.Errorf("failed to remove an interrupted bootstrap: %w", err)
	}
	m.sup.bootstrapped = false
	if err := m.finishInterruptedSwap(); err != nil {
		return err
	}
	switch {
	case !hasData(m.cfg.PGData):
	case fileExists(m.cfg.rewinding()) && m.role() == instanceapi.RoleReplica:
		m.log.Info("Cloning the primary again: a pg_rewind of this data did not finish")
		m.setMessage("cloning the primary again: a pg_rewind of this data did not finish")
	case m.role() == instanceapi.RoleReplica && m.otherMajor(ctx):
		// A major upgrade (or its rollback) reached this replica: the
		// primary's data is the one that counts, and it is cloned again.
		m.log.Info("Cloning the primary again: the data is of another major version than this image's")
		m.setMessage("cloning the primary again: the data is of another major version than this image's")
	case m.marked(recloneMark) && m.role() == instanceapi.RoleReplica:
		m.log.Info("Cloning the primary again", "reason", errWALGone.Error())
		m.setMessage("cloning the primary again: " + errWALGone.Error())
	default:
		if fileExists(m.cfg.rewinding()) {
			m.log.Info("Ignoring an unfinished pg_rewind: this instance is the primary now")
			if err := os.Remove(m.cfg.rewinding()); err != nil {
				return fmt.Errorf("failed to remove %s: %w", m.cfg.rewinding(), err)
			}
		}
		if m.marked(recloneMark) {
			// The lease names this instance now: its data, behind or not,
			// is what there is. Never wipe a primary's data for a replica's reason.
			m.log.Info("Ignoring the mark to clone again: this instance is the primary now")
			if err := os.Remove(filepath.Join(m.cfg.PGData, recloneMark)); err != nil {
				return fmt.Errorf("failed to remove %s: %w", recloneMark, err)
			}
		}
		err := m.checkIdentity()
		if !errors.Is(err, errReclone) {
			return err
		}
		m.log.Info("The replica's data belongs to another Database; cloning the primary again")
	}
	return m.bootstrap(ctx)
}
