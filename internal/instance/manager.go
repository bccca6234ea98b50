package instance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// Manager runs one PostgreSQL instance.
type Manager struct {
	cfg     *Config
	log     logr.Logger
	restore RestoreFunc

	// afterUpgradeOnce runs the post-upgrade work once the primary serves.
	afterUpgradeOnce sync.Once

	mu     sync.Mutex
	status instanceapi.Status

	// reload asks the supervisor to re-read the parameters file now (SIGHUP).
	reload chan struct{}
	// named says the lease just named this replica: it makes its peers'
	// slots at once, before they reconnect to it.
	named chan struct{}
	// promoteMu serializes promotions: the lease's naming and the
	// operator's promote call race (see promote).
	promoteMu sync.Mutex

	// lease is the primary lease; nil runs the role given in cfg for good
	// (tests of a single instance, and a pod without the Kubernetes API).
	lease Lease
	// holder is the instance the lease named when last read or watched
	// (guarded by mu); a replica streams from it (Config.upstream).
	holder string
	// forwarding, after a switchover handed the lease over, relays new
	// connections to the new primary until postgres starts again here
	// (guarded by mu).
	forwarding *forwarder
	// confMu serializes writes of the managed configuration: the lease
	// watch rewrites it while postgres runs.
	confMu sync.Mutex
	// lastHeartbeat and lastRenew: the last heartbeat commit and lease
	// renewal that succeeded (guarded by mu).
	lastHeartbeat, lastRenew time.Time
	// leaseUntil is when the last renewal known to this primary runs out,
	// less the fence margin: its own, or the one read when it learnt its
	// role or was promoted. Unlike lastRenew it outlives a postgres run;
	// a replica has none.
	leaseUntil time.Time
	// guardedRun is the postgres run (its context) whose lease guard runs
	// (see guardLease); run and runFence, the run under way and its fence
	// (guarded by mu).
	guardedRun, run context.Context //nolint:containedctx // the run a fence cancels: held to compare and cancel, not to pass down
	runFence        chan<- error
	// promoting: pg_promote runs; the guard extends the lease meanwhile
	// (guarded by mu).
	promoting bool
	// startFenced: the guard fenced a run that never served, at
	// restartLeaseLimit; startUnbounded: the next start, which failover
	// had a term to pre-empt, extends for as long as it takes (both
	// guarded by mu; see learnRole).
	startFenced, startUnbounded bool
	// restarting: postgres crashed, or was asked to restart, and is being
	// started again in place, with the lease kept (see restartingInPlace).
	restarting bool
	// restartReq carries a restart asked through the API to the supervisor.
	restartReq chan struct{}
	// startHolder is the lease holder as known when postgres last started
	// (supervisor only): a restart in place under another one rejoins.
	startHolder string
	// follow is the replica's check that it can follow (monitor only); it
	// outlives a postgres run, so the newest timeline seen is kept.
	follow followWatch
	// bootstrapped: this start made the data directory (nothing to rejoin).
	bootstrapped bool
	// demote carries a switchover from the API to the supervisor.
	demote chan demoteRequest
	// syncRecord is the synchronous_standby_names record the lease renewals
	// carry (instanceapi.AnnotationSync); syncRecorded, the one the last
	// renewal wrote (both guarded by mu).
	syncRecord, syncRecorded string
	// unwantedSlots: when each daytwo slot no instance wants was first seen
	// (only the monitor goroutine uses it).
	unwantedSlots map[string]time.Time
	// floors are the standby-sensitive settings this replica started above
	// its configuration, at its primary's logged values (guarded by confMu;
	// see writeStartConfig).
	floors map[string]floor
	// archiver ships WAL when the operator asks for archiving (or nil;
	// guarded by mu).
	archiver *wal.Archiver
	// backlog tracks WAL waiting for the archive (guarded by mu).
	backlog backlog
	// recovery, when set, makes a bootstrap from a backup a physical
	// restore (see recoverFromArchive); replay answers its
	// restore_command and reports its progress while it runs (guarded by
	// mu).
	recovery *Recovery
	replay   *replay
	// standbyWAL answers a replica's restore_command from the archive,
	// once it has not streamed since notStreamingSince for
	// standbyArchiveAfter (both guarded by mu).
	standbyWAL        *wal.Restorer
	notStreamingSince time.Time
	// streamed says the last observation saw this replica streaming, and
	// streamLost when one then saw it stop, until it streams again (both
	// guarded by mu): a replica
	// that just lost its primary stays ready for streamLossGrace (see ready).
	streamed   bool
	streamLost time.Time
	// pinger answers the readiness probe's ping (set up once by ping).
	pinger   pinger
	pingOnce sync.Once
	// receiverPID is the walreceiver the last observation saw streaming
	// (monitor only; see observe).
	receiverPID int
	// promise is this instance's promise to a holder not to be promoted,
	// and vouch the promises it holds as a holder (vouch.go).
	promise  promise
	vouch    vouchers
	apiWatch apiWatch
	// peerHTTP asks the other instances for promises; peerCA is the CA it
	// verifies them against (both guarded by peerMu).
	peerMu   sync.Mutex
	peerHTTP *http.Client
	peerCA   []byte
}

// UseLease makes the primary lease decide this instance's role: the holder
// runs as the primary while it can renew it, everyone else as a replica.
func (m *Manager) UseLease(l Lease) { m.lease = l }

// errFenced: a primary lost its lease and stopped postgres; the next round
// starts it again in the role the lease gives it.
var errFenced = errors.New("fenced")

// errRestartRequested: postgres stopped cleanly to start again in place,
// as asked through instanceapi.PathRestart.
var errRestartRequested = errors.New("restarting in place, as asked")

// errCrashed: postgres exited on its own. The manager starts it again in
// place up to maxCrashes times within crashWindow, crashPause apart; then it
// exits, and the kubelet's restart backoff takes over.
var errCrashed = errors.New("postgres exited unexpectedly")

const (
	maxCrashes  = 5
	crashWindow = 2 * time.Minute
	crashPause  = 200 * time.Millisecond
)

// New returns a manager for cfg. restore may be nil.
func New(cfg *Config, log logr.Logger, restore RestoreFunc) *Manager {
	m := &Manager{cfg: cfg, log: log, restore: restore, reload: make(chan struct{}, 1), named: make(chan struct{}, 1), demote: make(chan demoteRequest),
		restartReq: make(chan struct{}), promise: promise{path: cfg.promiseFile()},
		status: instanceapi.Status{Pod: cfg.Pod, Role: cfg.Role, Phase: instanceapi.PhaseBootstrapping}}
	// A promise the last run made still binds this one.
	m.promise.load(time.Now())
	return m
}

// Reload asks for the parameters file to be re-read.
func (m *Manager) Reload() {
	select {
	case m.reload <- struct{}{}:
	default:
	}
}

// Run prepares the data directory, starts postgres and supervises it until
// ctx ends (a fast shutdown follows) or postgres exits on its own (an error:
// the kubelet restarts the container). A failure that a restart cannot fix
// (a data directory of another major version, a restore without backups)
// keeps the API up with phase Failed, so it can be read, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	// Listen before anything else: without its API the instance can never be ready.
	serveErr, stop, err := m.serveAPI()
	if err != nil {
		return err
	}
	defer stop()
	stopMetrics, err := m.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()

	// Archiving outlives ctx too: postgres archives what it can while it
	// shuts down, after ctx ended.
	actx, acancel := context.WithCancel(context.WithoutCancel(ctx))
	defer acancel()
	if err := m.startWAL(actx, true); err != nil {
		return err
	}
	if w, ok := m.lease.(HolderWatcher); ok {
		// It outlives ctx: a deleted primary relays to the next one, which
		// the watch names, after ctx ended.
		wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
		defer wcancel()
		go m.followHolder(wctx, w)
	}
	var crashes []time.Time
	inPlace := false
	for {
		if inPlace {
			err = m.prepareInPlace(ctx)
		} else {
			err = m.prepare(ctx)
		}
		inPlace = false
		if err == nil {
			err = m.supervise(ctx)
		}
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errCrashed) {
			// A killed postmaster (the OOM killer, say) restarts here, with
			// crash recovery, far sooner than a container restart would;
			// a server that keeps dying is left to the kubelet.
			crashes = append(slices.DeleteFunc(crashes, func(t time.Time) bool { return time.Since(t) > crashWindow }), time.Now())
			if len(crashes) > maxCrashes {
				break
			}
			m.log.Info("Postgres exited unexpectedly; starting it again", "reason", err.Error(), "crashes", len(crashes))
			m.mu.Lock()
			m.restarting = true
			m.mu.Unlock()
			m.setPhase(instanceapi.PhaseStarting, err.Error())
			killOrphans()
			time.Sleep(crashPause)
			continue
		}
		if errors.Is(err, errRestartRequested) {
			m.setPhase(instanceapi.PhaseStarting, err.Error())
			inPlace = true
			continue
		}
		m.mu.Lock()
		m.restarting = false
		m.mu.Unlock()
		if !(errors.Is(err, errFenced) || errors.Is(err, errSwitchedOver)) {
			break
		}
		m.log.Info("Postgres stopped; starting again in the role the lease gives", "reason", err.Error())
		m.setPhase(instanceapi.PhaseStarting, err.Error())
	}
	if err != nil && ctx.Err() == nil {
		m.setPhase(instanceapi.PhaseFailed, err.Error())
		m.log.Error(err, "Instance failed")
		var perm permanentError
		if errors.As(err, &perm) {
			select {
			case <-ctx.Done():
				return nil
			case err := <-serveErr:
				return err
			}
		}
		return err
	}
	return nil
}

// serveAPI serves the instance API (HTTPS with Config.TLS) until stop.
func (m *Manager) serveAPI() (<-chan error, func(), error) {
	var tlsConfig *tls.Config
	if m.cfg.TLS {
		tlsConfig = m.cfg.apiTLSConfig()
	}
	return serve(m.cfg.HTTPAddress, m.Handler(), tlsConfig)
}

// serve serves h on addr (over TLS with tlsConfig) until stop; the channel
// carries the server's end.
func serve(addr string, h http.Handler, tlsConfig *tls.Config) (<-chan error, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsConfig}
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()
	return serveErr, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}, nil
}

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
	if m.role() != role || m.holderName() != m.startHolder {
		return m.prepare(ctx)
	}
	m.setPhase(instanceapi.PhaseStarting, "")
	return m.writeStartConfig(ctx)
}

// writeConfig writes the managed configuration into dir, streaming from
// the lease's holder as last seen.
func (m *Manager) writeConfig(dir string) error {
	m.confMu.Lock()
	defer m.confMu.Unlock()
	return m.cfg.writeConfig(dir, m.role(), m.holderName(), m.floors)
}

// holderName is the instance the lease named when last read or watched.
func (m *Manager) holderName() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holder
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
	m.mu.Lock()
	changed := holder != m.holder
	m.holder = holder
	m.mu.Unlock()
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
	m.confMu.Lock()
	defer m.confMu.Unlock()
	conf := filepath.Join(m.cfg.PGData, "postgresql.conf")
	if _, err := os.Stat(conf); err != nil {
		return // not written yet: the next start writes it for this holder
	}
	host, port := m.cfg.upstream(holder)
	if err := writeFileAtomic(conf, m.cfg.managedConf(instanceapi.RoleReplica, host, port, m.floors)); err != nil {
		m.log.Error(err, "Failed to point the replica at the new lease holder", "holder", holder)
		return
	}
	m.log.Info("Streaming from the new lease holder", "holder", holder, "host", host, "port", port)
	m.Reload()
}

// writeFileAtomic replaces path with content in one rename, so that a
// reader (postgres at a reload) never sees half of it.
func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to replace %s: %w", filepath.Base(path), err)
	}
	return nil
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
	m.bootstrapped = false
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

// bootstrap makes a complete data directory in staging, records its
// identity, and swaps it in for PGData.
func (m *Manager) bootstrap(ctx context.Context) error {
	if err := m.refuseToReplaceServedData(ctx); err != nil {
		return err
	}
	dir := m.cfg.staging()
	if err := clearDir(dir); err != nil {
		return err
	}
	var err error
	switch {
	case m.cfg.Role == instanceapi.RoleReplica:
		host, _ := m.upstream()
		m.log.Info("Cloning the primary", "primary", host)
		err = m.cloneFromPrimary(ctx, dir)
	case m.cfg.FromBackup && m.recovery == nil && m.restore == nil:
		// The restore init container restores; this container has no
		// storage to restore from. Only a new pod runs it again.
		err = permanentError{fmt.Errorf("%s: there is no data to serve, and only the restore init container may read the backup storage: "+
			"delete the pod to restore again", instanceapi.TerminationRestoreFailed)}
	case m.cfg.FromBackup && m.recovery != nil:
		m.log.Info("Restoring a base backup and the WAL archive", "prefix", m.recovery.Prefix, "target", targetText(m.recovery))
		if err = m.recoverFromArchive(ctx, dir); err != nil {
			err = fmt.Errorf("%s: %w", instanceapi.TerminationRestoreFailed, err)
		}
	case m.cfg.Import != nil:
		m.log.Info("Importing from an existing PostgreSQL", "host", m.cfg.Import.Host, "databases", m.cfg.Import.Databases)
		if err = m.importFrom(ctx, dir); err != nil {
			// Not permanent: the source may come back; the kubelet retries
			// from an empty staging directory.
			err = fmt.Errorf("%s: %w", instanceapi.TerminationImportFailed, err)
		}
	case m.cfg.FromBackup:
		m.log.Info("Restoring from a backup")
		if err = m.restoreFromBackup(ctx, dir); err != nil {
			// Not permanent: storage may come back; the kubelet retries.
			err = fmt.Errorf("%s: %w", instanceapi.TerminationRestoreFailed, err)
		}
	default:
		m.log.Info("Initialising an empty data directory")
		err = m.initdb(ctx, dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	if m.cfg.DatabaseUID != "" {
		id := Identity{DatabaseUID: m.cfg.DatabaseUID, Bootstrap: m.cfg.BootstrapSource, Created: time.Now().UTC()}
		if err := writeIdentity(dir, id); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(m.cfg.PGData); err != nil {
		return fmt.Errorf("failed to replace %s: %w", m.cfg.PGData, err)
	}
	if err := os.Rename(dir, m.cfg.PGData); err != nil {
		return fmt.Errorf("failed to move the bootstrapped data into place: %w", err)
	}
	if err := syncDir(filepath.Dir(m.cfg.PGData)); err != nil {
		return err
	}
	m.bootstrapped = true
	if err := os.Remove(m.cfg.rewinding()); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("failed to remove %s: %w", m.cfg.rewinding(), err)
	}
	m.log.Info("Bootstrap complete", "source", m.cfg.BootstrapSource)
	return nil
}

// checkVersion refuses a data directory written by another major version:
// starting it would fail at best. (A primary upgrades instead, see
// upgradeIfOlder; a replica clones again.)
func (m *Manager) checkVersion(ctx context.Context) error {
	data, err := upgrade.DataMajor(m.cfg.PGData)
	if err != nil {
		return err
	}
	binary, err := upgrade.BinaryMajor(ctx, m.cfg.BinDir)
	if err != nil {
		return err
	}
	if data != binary {
		return permanentError{fmt.Errorf("the data directory is PostgreSQL %s but this image runs PostgreSQL %s", data, binary)}
	}
	return nil
}

// supervise starts postgres and runs until it exits or ctx ends.
func (m *Manager) supervise(ctx context.Context) error {
	m.mu.Lock()
	f := m.forwarding
	m.mu.Unlock()
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
		m.mu.Lock()
		m.forwarding = nil
		m.mu.Unlock()
	}
	// Read before the start: a file that changes meanwhile then costs the
	// operator one more restart in place, never a setting thought applied.
	startHash := m.parametersHash()
	m.mu.Lock()
	m.status.StartConfigHash = startHash
	m.startHolder = m.holder
	m.mu.Unlock()
	if err := m.extendIfShort(ctx); err != nil {
		return err
	}
	cmd := exec.Command(m.cfg.bin("postgres"), "-D", m.cfg.PGData)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	m.log.Info("Starting postgres", "role", m.role())
	// Its own process group: a signal to the manager is not also delivered
	// to postgres by a terminal; the manager decides what postgres gets.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	runCtx, cancel := context.WithCancel(ctx)
	monitored := make(chan struct{})
	fence := make(chan error, 1)
	m.mu.Lock()
	m.run, m.runFence = runCtx, fence
	m.mu.Unlock()
	// Armed before the server can take a write, whether or not this run
	// ever renews.
	m.guardLease(runCtx, fence)
	go func() {
		defer close(monitored)
		m.monitor(runCtx, fence)
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
		m.mu.Lock()
		m.restarting = true
		sync := m.syncRecorded
		m.mu.Unlock()
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

// monitor waits for postgres to accept connections, finishes bootstrapping,
// then keeps the status fresh and reloads a changed parameters file.
func (m *Manager) monitor(ctx context.Context, fence chan<- error) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	hash := m.parametersHash()
	duties := false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if conn == nil || conn.IsClosed() {
			conn = m.connect(ctx)
		}
		if conn == nil {
			m.forgetStandbys()
		}
		if conn != nil {
			if newHash := m.parametersHash(); newHash != hash {
				hash = newHash
				m.Reload()
			}
			m.refreshTLS()
			m.observe(ctx, conn, hash)
			if conn != nil && !conn.IsClosed() {
				m.manageReplication(ctx, conn)
			} else {
				m.forgetStandbys() // a hung server's list is not to be trusted
			}
			if !duties {
				duties = m.startPrimaryDuties(ctx, fence)
			}
			if err := m.cannotFollow(ctx, &m.follow); err != nil {
				m.stopToRepair(err, fence)
			}
			if m.floorsReplayed(ctx) {
				m.log.Info("Replayed the primary's lowered settings; restarting to run this replica's own")
				select {
				case m.restartReq <- struct{}{}:
				case <-ctx.Done():
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-m.reload:
			if conn != nil {
				m.reloadConfig(ctx, conn)
			}
		case <-m.named:
			if conn != nil && !conn.IsClosed() {
				m.manageReplication(ctx, conn)
			}
		case <-tick.C:
		}
	}
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

// connect opens the local superuser connection and, on a primary, ensures
// the roles. It returns nil while postgres is not ready yet.
func (m *Manager) connect(ctx context.Context) *pgx.Conn {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, m.localDSN())
	if err != nil {
		return nil
	}
	// The manager's own writes (roles) must not wait for a synchronous
	// standby that may not be there.
	if _, err := conn.Exec(cctx, "SET synchronous_commit = local"); err != nil {
		_ = conn.Close(ctx)
		return nil
	}
	if m.role() == instanceapi.RolePrimary {
		if err := m.ensureRoles(ctx, conn); err != nil {
			m.setMessage(err.Error())
			m.log.Error(err, "Failed to ensure roles")
			_ = conn.Close(ctx)
			return nil
		}
		m.afterUpgradeOnce.Do(func() { go m.afterUpgrade(ctx) })
	}
	return conn
}

// manageReplication keeps replication slots and, on the primary,
// synchronous_standby_names in line with the operator's wish.
func (m *Manager) manageReplication(ctx context.Context, conn *pgx.Conn) {
	r, err := m.cfg.replication()
	if err != nil {
		m.log.Error(err, "Failed to read the replication settings")
		m.forgetStandbys() // not refreshed: not to be trusted
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m.manageSlots(ctx, conn, r)
	if m.role() == instanceapi.RolePrimary {
		m.manageSync(ctx, conn, r)
	}
}

func (m *Manager) localDSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres connect_timeout=3", m.cfg.RunDir, m.cfg.Port)
}

func (m *Manager) reloadConfig(ctx context.Context, conn *pgx.Conn) {
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		m.log.Error(err, "Failed to reload the configuration")
		return
	}
	m.log.Info("Reloaded the configuration")
	// The postmaster applies a reload asynchronously; give it a moment
	// before pending_restart is read.
	time.Sleep(200 * time.Millisecond)
}

// walPositions selects Status.LSN (replayed on a replica, written on a
// primary) and Status.ReceivedLSN, "" for none.
const walPositions = `COALESCE(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text, ''),
		COALESCE(pg_last_wal_receive_lsn()::text, '')`

// observe refreshes the status from the running server.
func (m *Manager) observe(ctx context.Context, conn *pgx.Conn, hash string) {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var version, lsn, received string
	var inRecovery bool
	var timeline, receiver int
	err := conn.QueryRow(qctx, `SELECT current_setting('server_version'), pg_is_in_recovery(), `+walPositions+`,
		COALESCE((SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'), 0),
		CASE WHEN pg_is_in_recovery() THEN COALESCE(GREATEST((SELECT received_tli FROM pg_stat_wal_receiver),
			(SELECT timeline_id FROM pg_control_checkpoint()), (SELECT min_recovery_end_timeline FROM pg_control_recovery())), 0)
			ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).
		Scan(&version, &inRecovery, &lsn, &received, &receiver, &timeline)
	if err != nil {
		_ = conn.Close(ctx)
		return
	}
	// A walreceiver says "streaming" from the moment it starts, even one the
	// primary refuses at once (WAL gone): retried every
	// wal_retrieve_retry_interval, such a replica would look streaming in
	// many samples. Only a receiver that outlived two observations counts.
	streaming := receiver != 0 && receiver == m.receiverPID
	m.receiverPID = receiver
	if inRecovery {
		// received_tli vanishes with the walreceiver, as when the primary
		// just died, and the control file's timelines can lag the one being
		// replayed for minutes; failover ranks replicas by timeline first,
		// so report the newest one seen (see followWatch).
		timeline = max(timeline, m.follow.timeline)
	}
	rows, err := conn.Query(qctx, "SELECT name FROM pg_settings WHERE pending_restart ORDER BY name")
	if err != nil {
		_ = conn.Close(ctx)
		return
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	settings := map[string]string{}
	rows, err = conn.Query(qctx, "SELECT name, setting FROM pg_settings WHERE name = ANY($1)", postgres.StandbySensitive)
	if err != nil {
		_ = conn.Close(ctx)
		return
	}
	var name, value string
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error { settings[name] = value; return nil }); err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &m.status
	s.PostgresVersion, s.InRecovery, s.LSN, s.ConfigHash, s.Streaming = version, inRecovery, lsn, hash, streaming
	m.noteStreaming(streaming)
	s.ReceivedLSN, s.Timeline = received, timeline
	s.PendingRestartSettings, s.PendingRestart = pending, len(pending) > 0
	s.StandbySettings = settings
	if s.Phase == instanceapi.PhaseStarting {
		s.Phase, s.Message = instanceapi.PhaseRunning, ""
		m.log.Info("Instance is running", "role", s.Role, "version", version)
	}
}

func (m *Manager) parametersHash() string {
	b, err := os.ReadFile(m.cfg.ParametersFile)
	if err != nil {
		return ""
	}
	return instanceapi.ParametersHash(b)
}

func (m *Manager) setPhase(p instanceapi.Phase, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Phase, m.status.Message = p, msg
	if p != instanceapi.PhaseRunning {
		// Positions are what a running server reports: a failover must not
		// rank this instance by what it had before it stopped.
		m.status.LSN, m.status.ReceivedLSN, m.status.Streaming = "", "", false
		m.status.Standbys = nil
		m.notStreamingSince, m.streamed, m.streamLost = time.Time{}, false, time.Time{}
	}
}

func (m *Manager) setMessage(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Message = msg
}

// Status returns a copy of the current status.
func (m *Manager) Status() instanceapi.Status {
	// Before mu: a promise being given holds its lock over a file write.
	now := time.Now()
	promisedTo, promised := m.promise.active(now)
	vouchedFor, vouchedLSN := m.promise.vouched()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.status
	s.PendingRestartSettings = append([]string(nil), s.PendingRestartSettings...)
	if m.replay != nil {
		r := m.replay.progress(time.Now())
		s.Recovery = &r
	} else if s.Recovery != nil {
		r := *s.Recovery
		s.Recovery = &r
	}
	if m.archiver != nil {
		s.Archive = archiveStatus(m.archiver.Stats())
		m.backlog.fill(s.Archive, filepath.Join(m.cfg.PGData, "pg_wal"), time.Now())
	}
	if promised {
		s.PromisedTo = promisedTo
	}
	s.VouchedFor, s.VouchedLSN = vouchedFor, vouchedLSN
	s.ServingOnPromises = s.Role == instanceapi.RolePrimary && s.Phase == instanceapi.PhaseRunning && m.lease != nil &&
		!now.Before(m.leaseUntil) && m.vouch.covers(now)
	return s
}

// role is what the instance runs as now (a promotion changes it).
func (m *Manager) role() instanceapi.Role {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status.Role
}

func (m *Manager) setRole(r instanceapi.Role) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Role = r
	m.cfg.Role = r
	if r != instanceapi.RolePrimary {
		m.leaseUntil = time.Time{} // a term handed on is not this instance's to count on
		m.vouch.reset()
		m.promise.reopen()
	}
}
