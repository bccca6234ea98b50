package instance

import (
	"context"
	"errors"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// Manager runs one PostgreSQL instance. Its goroutines are the
// supervisor (Run: prepare, start and stop postgres), the monitor
// (observe, sync, follow), the lease guard (renew and fence), the holder
// watch, the WAL archiver and the API handlers. What more than one of them
// touches lives in shared, under its mutex; what one of them owns alone
// lives in that goroutine's own struct (sup, and the monitorState each
// run's monitor is handed), which nothing else reads.
type Manager struct {
	cfg     *Config
	log     logr.Logger
	restore RestoreFunc
	// source is a replica Database's source (openSource), or nil; set
	// before anything runs, never changed.
	source *source

	// afterUpgradeOnce runs the post-upgrade work once the primary serves.
	afterUpgradeOnce sync.Once

	shared shared
	sup    supervisorState
	conf   confState
	peers  peerState

	// reload asks the supervisor to re-read the parameters file now (SIGHUP).
	reload chan struct{}
	// named says the lease just named this replica: it makes its peers'
	// slots at once, before they reconnect to it.
	named chan struct{}
	// promoteMu serializes promotions: the lease's naming and the
	// operator's promote call race (see promote).
	promoteMu sync.Mutex
	// logs carries PostgreSQL's lines into the manager's stream (pglog.go).
	logs *logRelay
	// restartReq carries a restart asked through the API to the supervisor.
	restartReq chan struct{}
	// unfenced wakes a supervisor that waits while fenced on request;
	// fenceMu orders fence requests.
	unfenced chan struct{}
	fenceMu  sync.Mutex
	// demote carries a switchover from the API to the supervisor.
	demote chan demoteRequest

	// recovery, when set, makes a bootstrap from a backup a physical
	// restore (see recoverFromArchive). Set before Run, read-only after.
	recovery *Recovery
	// lease is the primary lease; nil runs the role given in cfg for good
	// (tests of a single instance, and a pod without the Kubernetes API).
	lease Lease
	// pinger answers the readiness probe's ping (set up once by ping).
	pinger   pinger
	pingOnce sync.Once
	// promise is this instance's promise to a holder not to be promoted,
	// and vouch the promises it holds as a holder (vouch.go).
	promise  promise
	vouch    vouchers
	apiWatch apiWatch
}

// shared is the state more than one of the Manager's goroutines reads or
// writes: every field only with mu held. cfg.Role too changes under mu
// (setRole, on a promotion): read it through role().
type shared struct {
	mu     sync.Mutex
	status instanceapi.Status
	// holder is the instance the lease named when last read or watched; a
	// replica streams from it (Config.upstream).
	holder string
	// forwarding, after a switchover handed the lease over, relays new
	// connections to the new primary until postgres starts again here.
	forwarding *forwarder
	// lastHeartbeat and lastRenew: the last heartbeat commit and lease
	// renewal that succeeded.
	lastHeartbeat, lastRenew time.Time
	// lastRenewTerm is the term lastRenew counts for: the one its renewal
	// recorded, or this instance's own if shorter.
	lastRenewTerm time.Duration
	// leaseUntil is when the last renewal known to this primary runs out,
	// less the fence margin: its own, or the one read when it learnt its
	// role or was promoted. Unlike lastRenew it outlives a postgres run;
	// a replica has none.
	leaseUntil time.Time
	// guardedRun is the postgres run (its context) whose lease guard runs
	// (see guardLease); run and runFence, the run under way and its fence.
	guardedRun, run context.Context //nolint:containedctx // the run a fence cancels: held to compare and cancel, not to pass down
	runFence        chan<- error
	// promoting: pg_promote runs; the guard extends the lease meanwhile.
	promoting bool
	// startFenced: the guard fenced a run that never served, at
	// restartLeaseLimit; startUnbounded: the next start, which failover
	// had a term to pre-empt, extends for as long as it takes (see
	// learnRole).
	startFenced, startUnbounded bool
	// restarting: postgres crashed, or was asked to restart, and is being
	// started again in place, with the lease kept (see restartingInPlace).
	restarting bool
	// syncRecord is the synchronous_standby_names record the lease renewals
	// carry (instanceapi.AnnotationSync); syncRecorded, the one the last
	// renewal wrote.
	syncRecord, syncRecorded string
	// archiver ships WAL when the operator asks for archiving (or nil).
	archiver *wal.Archiver
	// backlog tracks WAL waiting for the archive.
	backlog backlog
	// replay answers a recovery's restore_command and reports its
	// progress while it runs.
	replay *replay
	// standbyWAL answers a replica's restore_command from the archive,
	// once it has not streamed since notStreamingSince for
	// standbyArchiveAfter.
	standbyWAL        *wal.Restorer
	notStreamingSince time.Time
	// replayedAt is when the newest transaction replayed here committed
	// (nil on a primary, or before any).
	replayedAt *time.Time
	// releasedSuperseded: a superseded instance released its lease.
	releasedSuperseded bool
	// streamed says the last observation saw this replica streaming, and
	// streamLost when one then saw it stop, until it streams again: a
	// replica that just lost its primary stays ready for streamLossGrace
	// (see ready).
	streamed   bool
	streamLost time.Time
}

// supervisorState is the supervisor's own (Run and what it calls).
type supervisorState struct {
	// startHolder is the lease holder as known when postgres last
	// started: a restart in place under another one rejoins.
	startHolder string
	// bootstrapped: this start made the data directory (nothing to rejoin).
	bootstrapped bool
	// monitor is the state the last run's monitor was handed, and
	// monitorDone closes when that monitor has stopped (see nextMonitor).
	monitor     *monitorState
	monitorDone <-chan struct{}
}

// nextMonitor is the state the next run's monitor owns: the last run's,
// once its monitor has stopped, so the newest timeline seen is kept; a
// fresh one when that monitor outlived supervise's bounded wait and still
// runs, so two monitors never share it.
func (s *supervisorState) nextMonitor(done <-chan struct{}, log logr.Logger) *monitorState {
	prev := s.monitor
	if prev != nil {
		select {
		case <-s.monitorDone:
		default:
			log.Info("The last run's monitor still runs; this run's starts afresh")
			prev = nil
		}
	}
	if prev == nil {
		prev = &monitorState{}
	}
	s.monitor, s.monitorDone = prev, done
	return prev
}

// monitorState is a run's monitor's own (monitor.go and what it calls).
type monitorState struct {
	// follow is the replica's check that it can follow; it outlives a
	// postgres run, so the newest timeline seen is kept.
	follow followWatch
	// unwantedSlots: when each daytwo slot no instance wants was first seen.
	unwantedSlots map[string]time.Time
	// receiverPID is the walreceiver the last observation saw streaming
	// (see observe).
	receiverPID int
}

// confState serializes writes of the managed configuration: the lease
// watch rewrites it while postgres runs.
type confState struct {
	mu sync.Mutex
	// floors are the standby-sensitive settings this replica started
	// above its configuration, at its primary's logged values (see
	// writeStartConfig). The map is replaced, never changed in place: a
	// copy of it read under mu can be read after.
	floors map[string]floor
}

// peerState is how the instance asks the others for promises: http, and
// ca, the CA it verifies them against (both under mu).
type peerState struct {
	mu   sync.Mutex
	http *http.Client
	ca   []byte
}

// UseLease makes the primary lease decide this instance's role: the holder
// runs as the primary while it can renew it, everyone else as a replica.
func (m *Manager) UseLease(l Lease) { m.lease = l }

// leaseTerm is the term this instance's renewals record, and the one it
// fences by (Config.LeaseDuration).
func (m *Manager) leaseTerm() time.Duration { return leaseTerm(m.cfg.LeaseDuration) }

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
		restartReq: make(chan struct{}), unfenced: make(chan struct{}, 1), promise: promise{path: cfg.promiseFile()}, logs: &logRelay{out: os.Stderr},
		shared: shared{status: instanceapi.Status{Pod: cfg.Pod, Role: cfg.Role, Phase: instanceapi.PhaseBootstrapping}}}
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
	if err := m.openSource(); err != nil {
		return err
	}

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
		if err = m.waitWhileFenced(ctx); err != nil {
			break
		}
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
			m.shared.mu.Lock()
			m.shared.restarting = true
			m.shared.mu.Unlock()
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
		m.shared.mu.Lock()
		m.shared.restarting = false
		m.shared.mu.Unlock()
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
