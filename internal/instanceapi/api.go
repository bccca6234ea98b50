package instanceapi

import "time"

// Port is where the instance manager serves its HTTP API in the pod.
const Port = 8000

// MetricsPort is where the instance manager serves /metrics, over plain
// HTTP, in the pod.
const MetricsPort = 9187

// PostgresPort is where PostgreSQL listens in the pod.
const PostgresPort = 5432

// Paths of the API.
const (
	// PathHealthz answers 200 while the instance manager is alive (liveness).
	PathHealthz = "/healthz"
	// PathReadyz answers 200 when PostgreSQL accepts connections and the
	// instance finished bootstrapping (readiness: Services and rollouts gate on it).
	PathReadyz = "/readyz"
	// PathStatus answers a Status document. With ?fresh=true (QueryFresh)
	// a running instance reads its WAL positions from postgres for the
	// answer, instead of giving the last observation's (up to a second
	// old): failover weighs replicas the moment a primary released its
	// lease. A manager that cannot read them now answers as without
	// (Status.PositionsReadNow).
	PathStatus = "/status"
	// QueryFresh asks PathStatus for positions read now.
	QueryFresh = "fresh"
	// PathPromote (POST, authenticated) turns a replica into the primary.
	// The instance refuses unless the primary lease names it. The body, a
	// PromoteRequest, is optional.
	PathPromote = "/promote"
	// PathDemote (POST, authenticated, a DemoteRequest) is the old primary's
	// half of a switchover: it shuts postgres down cleanly, hands the lease
	// to the named replica with the LSN of its shutdown checkpoint, answers a
	// DemoteResult, and starts again as a replica.
	PathDemote = "/demote"
	// PathRestart (POST, authenticated, no body) restarts postgres in place
	// with a fast shutdown, keeping the pod and, on a primary, the lease
	// and its readiness (see Status.StandbySettings for why).
	PathRestart = "/restart"
	// PathFence (POST, authenticated, a FenceRequest) fences the
	// instance on request, or lifts that fence: postgres stops and stays
	// stopped, the instance manager and the pod keep running (for
	// forensics), and a restart keeps it so, until it is lifted.
	PathFence = "/fence"
	// PathCheckpoint (POST, authenticated, no body) runs CHECKPOINT and
	// answers when it is done. The operator asks for one before a planned
	// stop of a primary (a switchover, a restart in place), so the shutdown
	// checkpoint has little left to write and writes stop for less time.
	PathCheckpoint = "/checkpoint"
	// PathVouch (POST, the token over TLS, a VouchRequest) asks a replica
	// to promise the lease holder not to become a primary for
	// PromiseDuration (see VouchPeriod). It answers a VouchResult, or 409
	// from an instance that is a primary itself. Another instance asks it,
	// not the operator.
	PathVouch = "/vouch"
)

// PromoteRequest is the body of POST /promote.
type PromoteRequest struct {
	// WaitLSN: in a switchover, promote only once this replica has received
	// WAL up to the old primary's shutdown checkpoint, so no acknowledged
	// write is lost. Empty in a failover.
	WaitLSN string `json:"waitLSN,omitempty"`
}

// DemoteRequest is the body of POST /demote.
type DemoteRequest struct {
	// To is the replica the primary lease goes to.
	To string `json:"to"`
	// Request is the switchover request's time, recorded on the Lease.
	Request string `json:"request,omitempty"`
}

// DemoteResult answers POST /demote.
type DemoteResult struct {
	// LSN is the old primary's shutdown checkpoint: the end of what it wrote.
	LSN string `json:"lsn"`
}

// Role of an instance.
type Role string

// Roles.
const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// Phase of the instance manager's life cycle.
type Phase string

// Phases.
const (
	// PhaseBootstrapping: initdb, restore or base backup is running.
	PhaseBootstrapping Phase = "Bootstrapping"
	// PhaseStarting: postgres is starting or the instance is being configured.
	PhaseStarting Phase = "Starting"
	// PhaseRunning: postgres accepts connections.
	PhaseRunning Phase = "Running"
	// PhaseFailed: the instance cannot run; Message says why.
	PhaseFailed Phase = "Failed"
	// PhaseStopping: a shutdown was asked for.
	PhaseStopping Phase = "Stopping"
	// PhaseFenced: postgres is stopped and stays so, fenced on request
	// (PathFence); the instance manager answers on.
	PhaseFenced Phase = "Fenced"
)

// Status is what GET /status returns.
type Status struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Role is what the instance was started as.
	Role Role `json:"role"`
	// Phase is where the instance manager is in its life cycle.
	Phase Phase `json:"phase"`
	// Ready mirrors /readyz.
	Ready bool `json:"ready"`
	// Message explains a Failed phase or what the instance waits for.
	Message string `json:"message,omitempty"`
	// PostgresVersion is the server_version PostgreSQL reports.
	PostgresVersion string `json:"postgresVersion,omitempty"`
	// InRecovery is pg_is_in_recovery(): true on a replica.
	InRecovery bool `json:"inRecovery"`
	// LSN is the current WAL location: pg_current_wal_lsn() on a primary,
	// pg_last_wal_replay_lsn() on a replica.
	LSN string `json:"lsn,omitempty"`
	// ReceivedLSN is pg_last_wal_receive_lsn() on a replica: the WAL it
	// holds, replayed or not. Failover promotes the replica holding most.
	ReceivedLSN string `json:"receivedLSN,omitempty"`
	// Timeline is the timeline the instance runs on.
	Timeline int `json:"timeline,omitempty"`
	// Streaming is true on a replica whose WAL receiver streams from the
	// primary. A replica that does not stream is not ready: it serves ever
	// older data.
	Streaming bool `json:"streaming"`
	// PendingRestart is true when a changed setting waits for a restart.
	PendingRestart bool `json:"pendingRestart"`
	// PendingRestartSettings names those settings.
	PendingRestartSettings []string `json:"pendingRestartSettings,omitempty"`
	// ConfigHash identifies the configuration file the instance last loaded
	// (ParametersHash of its content).
	ConfigHash string `json:"configHash,omitempty"`
	// StartConfigHash identifies the configuration file postgres last
	// started with: its restart-only settings run that file's values. A
	// restart in place is done once it equals the operator's ConfigHash.
	StartConfigHash string `json:"startConfigHash,omitempty"`
	// RaisedSettings names the settings a replica started with at its
	// primary's higher values instead of its file's, until it replays the
	// primary's change and restarts by itself (the manager's floors).
	RaisedSettings []string `json:"raisedSettings,omitempty"`
	// PositionsReadNow: LSN and ReceivedLSN were read from postgres for
	// this answer (QueryFresh), not taken from the last observation.
	PositionsReadNow bool `json:"positionsReadNow,omitempty"`
	// PromisedTo, on an instance that promised a lease holder not to be
	// promoted (PathVouch), names that holder while the promise lasts.
	PromisedTo string `json:"promisedTo,omitempty"`
	// VouchedFor and VouchedLSN: the last holder that asked this instance
	// for a promise, and its WAL position then (VouchRequest.LSN), kept
	// after the promise ends.
	VouchedFor string `json:"vouchedFor,omitempty"`
	VouchedLSN string `json:"vouchedLSN,omitempty"`
	// ServingOnPromises, on a primary, is true while it serves past its
	// lease's term on its peers' promises (it cannot renew the lease).
	ServingOnPromises bool `json:"servingOnPromises,omitempty"`
	// Standbys, on a running primary, names the replicas that stream from
	// this run of its server (pg_stat_replication), by pod.
	Standbys []string `json:"standbys,omitempty"`
	// StandbySettings are the running values of the settings a replica may
	// not run lower than its primary (postgres.StandbySensitive). Lowering
	// one needs the primary restarted first, in place.
	StandbySettings map[string]string `json:"standbySettings,omitempty"`
	// Archive is what WAL archiving did since the manager started, when the
	// operator asks for archiving.
	Archive *ArchiveStatus `json:"archive,omitempty"`
	// Recovery is the progress of a point-in-time recovery while the
	// instance bootstraps from a base backup and the WAL archive.
	Recovery *RecoveryProgress `json:"recovery,omitempty"`
	// Source is how an instance of a replica Database follows its
	// source, while the primary lease names the source (ExternalHolder).
	Source *SourceProgress `json:"source,omitempty"`
	// FencedOnRequest: the instance is fenced on request (PathFence).
	FencedOnRequest bool `json:"fencedOnRequest,omitempty"`
	// Superseded names the Database promoted from this one's WAL archive
	// (a PromotionClaim not its own): this instance never serves as
	// primary again.
	Superseded string `json:"superseded,omitempty"`
}

// SourceProgress is how far a replica Database's instance has followed
// its source.
type SourceProgress struct {
	// Streaming: the walreceiver streams from the source.
	Streaming bool `json:"streaming,omitempty"`
	// EndLSN is the newest WAL of the source this instance knows of: the
	// end of the newest segment found in the archive, or what it received.
	EndLSN string `json:"endLSN,omitempty"`
	// ReplayedTime is when the newest transaction replayed here committed
	// (pg_last_xact_replay_timestamp).
	ReplayedTime *time.Time `json:"replayedTime,omitempty"`
}

// RecoveryProgress is how far a point-in-time recovery has replayed.
type RecoveryProgress struct {
	// BaseBackup is the base backup it started from.
	BaseBackup string `json:"baseBackup"`
	// TargetTime and TargetLSN are the recovery target; neither is the end
	// of the archive.
	TargetTime *time.Time `json:"targetTime,omitempty"`
	TargetLSN  string     `json:"targetLSN,omitempty"`
	// ReplayedLSN is how far replay has come: the start of the WAL
	// segment it replays now.
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// EndLSN is where replay ends at most: the target LSN, or the end of
	// the newest segment archived when recovery began.
	EndLSN string `json:"endLSN,omitempty"`
	// BytesPerSecond is the replay rate since recovery began, and
	// RemainingSeconds the time left at that rate up to EndLSN.
	BytesPerSecond   int64 `json:"bytesPerSecond,omitempty"`
	RemainingSeconds int64 `json:"remainingSeconds,omitempty"`
	// Restored counts the WAL files fetched from the archive, Prefetched
	// those fetched before replay asked for them.
	Restored   int `json:"restored"`
	Prefetched int `json:"prefetched"`
}

// ArchiveStatus counts the WAL files this instance shipped.
type ArchiveStatus struct {
	Archived int `json:"archived"`
	Failed   int `json:"failed"`
	// LastArchived is the newest file shipped, and when.
	LastArchived     string     `json:"lastArchived,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	// LastError is the latest failure since the last success, and when.
	LastError     string     `json:"lastError,omitempty"`
	LastErrorTime *time.Time `json:"lastErrorTime,omitempty"`
	// Pending counts the WAL files PostgreSQL has finished and not yet
	// seen archived, PendingBytes their size: they stay in pg_wal until
	// they are.
	Pending      int   `json:"pending"`
	PendingBytes int64 `json:"pendingBytes"`
	// VolumeFreeBytes is the free space on the data volume, and
	// TimeToFullSeconds when it runs out at the rate the backlog grew
	// over the last minutes (0: it does not grow).
	VolumeFreeBytes   int64 `json:"volumeFreeBytes,omitempty"`
	TimeToFullSeconds int64 `json:"timeToFullSeconds,omitempty"`
}

// Error is the body of a non-2xx answer.
type Error struct {
	Message string `json:"message"`
}

// FenceRequest is PathFence's body.
type FenceRequest struct {
	Fenced bool `json:"fenced"`
}
