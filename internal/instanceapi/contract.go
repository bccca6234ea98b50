package instanceapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// What the operator's pod template and the instance manager must agree on:
// mount paths, secret file names and the flags the template passes.
const (
	// ControllerMount is the emptyDir the init container copies the daytwo
	// binary into; the instance manager keeps its socket directory there.
	ControllerMount = "/controller"
	// Binary is the instance manager inside ControllerMount.
	Binary = ControllerMount + "/daytwo"
	// RunDir holds the socket and the password file.
	RunDir = ControllerMount + "/run"
	// DataMount is where the data volume is mounted; PGData is below it so
	// a bootstrap can stage next to it on the same volume.
	DataMount = "/var/lib/postgresql/data"
	PGData    = DataMount + "/pgdata"
	// ConfigDir holds the operator's rendered ParametersFile.
	ConfigDir      = "/etc/daytwo/config"
	ParametersFile = "postgresql.conf"
	// ReplicationFile, next to ParametersFile, is the Replication the
	// operator asks for, as JSON.
	ReplicationFile = "replication.json"
	// ArchiveFile, next to ParametersFile, is the Archive the operator asks
	// for, as JSON; without it nothing is archived.
	ArchiveFile = "archive.json"
	// SecretsDir holds the secret files below.
	SecretsDir = "/etc/daytwo/secrets"
	// SecretAppPassword, SecretReplicationPassword and SecretAPIToken are
	// file names in SecretsDir.
	SecretAppPassword         = "app-password"
	SecretReplicationPassword = "replication-password"
	SecretAPIToken            = "api-token"
	// SecretArchiveAccessKeyID and SecretArchiveSecretAccessKey are the S3
	// credentials WAL archiving uses, in SecretsDir.
	SecretArchiveAccessKeyID     = "archive-access-key-id"
	SecretArchiveSecretAccessKey = "archive-secret-access-key"
	// SecretArchiveCA, when projected, holds a private CA the archive's S3
	// endpoint chains to.
	SecretArchiveCA = "archive-ca.crt"
	// SecretArchiveToken, when projected, is a ServiceAccount token the
	// archive's S3 credentials are obtained with (S3Access.RoleARN).
	SecretArchiveToken = "archive-web-identity-token"
	// SecretArchiveSeriesKey, when projected, is the series key the WAL
	// archive's files are sealed with (the Physical DatabaseBackup's).
	SecretArchiveSeriesKey = "archive-series-key"
	// SecretArchiveEncryptionKey, when projected, is the key the WAL
	// archive's files are encrypted with.
	SecretArchiveEncryptionKey = "archive-encryption-key"
	// ReplicaSourceFile, next to ParametersFile, is the ReplicaSource of a
	// replica Database, as JSON.
	ReplicaSourceFile = "replica-source.json"
	// SecretSourceReplicationPassword and SecretSourceServerCA, in
	// SecretsDir, are the source's replication password and the CA its
	// server certificate is verified with, when the replica streams.
	SecretSourceReplicationPassword = "source-replication-password"
	SecretSourceServerCA            = "source-server-ca.crt"
	// SecretTLSCert, SecretTLSKey and SecretTLSCA, in SecretsDir with
	// FlagTLS, are the server certificate the instance serves, its key, and
	// the CA it verifies other instances with.
	SecretTLSCert = "tls.crt"
	SecretTLSKey  = "tls.key"
	SecretTLSCA   = "ca.crt"
	// SecretAPIClientCA, in SecretsDir with FlagTLS, is the Database's
	// daytwo CA: the instance API serves HTTPS with the server certificate
	// and requires of every call but the probes a client certificate it
	// issued (the operator's).
	SecretAPIClientCA = "api-client-ca.crt"
)

// Flags of `daytwo instance run` (RunFlags).
const (
	FlagCluster         = "cluster"
	FlagPod             = "pod"
	FlagPrimaryHost     = "primary-host"
	FlagPeers           = "peers"
	FlagPeerAPIs        = "peer-apis"
	FlagPGData          = "pgdata"
	FlagRunDir          = "run-dir"
	FlagShutdownTimeout = "shutdown-timeout"
	FlagLeaseDuration   = "lease-duration"
	FlagDatabaseUID     = "database-uid"
	FlagBootstrapSource = "bootstrap-source"
	FlagReuseData       = "reuse-data"
	// FlagUpgradeFrom is the directory of the old major's programs, bundled
	// by the old image's init container (upgrade.Bundle).
	FlagUpgradeFrom = "upgrade-from"
	// FlagUpgradeOnly upgrades and exits: the upgrade Job's command.
	FlagUpgradeOnly = "upgrade-only"
	// FlagBootstrapOnly restores a primary's data from a backup, when it
	// has none, and exits: the restore init container's command, the only
	// container given the storage credentials.
	FlagBootstrapOnly = "bootstrap-only"
	// Flags of bootstrap.import; the password is EnvImportPassword.
	FlagImportHost      = "import-host"
	FlagImportPort      = "import-port"
	FlagImportUser      = "import-user"
	FlagImportDatabases = "import-databases"
	FlagImportRoles     = "import-roles"
	// EnvImportUser and EnvImportPassword are the source user's name and
	// password for bootstrap.import, from its Secret.
	EnvImportUser     = "DAYTWO_IMPORT_USER"
	EnvImportPassword = "DAYTWO_IMPORT_PASSWORD"
	FlagFromBackup    = "from-backup"
	FlagRestoreID     = "restore-id"
	// FlagRestorePhysical makes --from-backup a point-in-time recovery from
	// a base backup and the WAL archive, to FlagRecoveryTargetTime or
	// FlagRecoveryTargetLSN (or the archive's end).
	FlagRestorePhysical    = "restore-physical"
	FlagRecoveryTargetTime = "recovery-target-time"
	FlagRecoveryTargetLSN  = "recovery-target-lsn"
	FlagDatabase           = "database"
	FlagOwner              = "owner"
	FlagTerminationLog     = "termination-log"
	FlagLease              = "lease"
	FlagNamespace          = "namespace"
	// FlagTLS serves TLS with the files SecretTLSCert and SecretTLSKey,
	// requires it of every network connection, and verifies other
	// instances against SecretTLSCA.
	FlagTLS = "tls"
	// Flags a pod template leaves at their defaults (tests set them).
	FlagRole            = "role"
	FlagSecretsDir      = "secrets-dir"
	FlagParametersFile  = "parameters-file"
	FlagBinDir          = "bin-dir"
	FlagHTTPAddress     = "http-address"
	FlagMetricsAddress  = "metrics-address"
	FlagPort            = "port"
	FlagPrimaryPort     = "primary-port"
	FlagUpgradeDeadline = "upgrade-deadline"
)

// ReplicationUser is the role replicas stream as and base backups are
// taken as.
const ReplicationUser = "streaming_replica"

// Flag renders --name=value.
func Flag(name, value string) string { return "--" + name + "=" + value }

// The primary lease: a coordination.k8s.io Lease per Database whose holder is
// the one instance allowed to serve writes. The instance manager of the holder
// renews it while its own write path works (a heartbeat commit succeeds); the
// operator moves it to another instance only once it has expired, and only
// then asks that instance to promote. An instance that cannot renew stops
// postgres before the lease can expire, so two primaries never accept writes
// at once, whether the operator runs or not.
const (
	// LeaseDuration is how long a renewal is valid, unless the Database
	// sets another term (FlagLeaseDuration, within MinLeaseDuration and
	// MaxLeaseDuration). Each renewal records its term on the Lease; the
	// holder fences by the term it recorded, and the operator judges
	// expiry by the term the Lease records.
	LeaseDuration = 7 * time.Second
	// MinLeaseDuration and MaxLeaseDuration bound a Database's term. The
	// floor leaves a holder three renewals (LeaseRenewPeriod) and its
	// heartbeat's deadline before its fence (LeaseFenceMargin ahead of the
	// term); the ceiling is also what a holder trusts of a term another
	// renewer wrote.
	MinLeaseDuration = 5 * time.Second
	MaxLeaseDuration = 60 * time.Second
	// LeaseRenewPeriod is how often the holder renews.
	LeaseRenewPeriod = time.Second
	// LeaseFenceMargin: the holder fences itself this long before its last
	// renewal expires, on its own clock, counting from the renewal's start
	// (or, for a renewal it did not make, from the renewTime the renewer
	// wrote). The operator moves the lease no sooner than renewTime plus
	// LeaseDuration on its clock. With the holder's fence due at a timer
	// (not a tick) and carried out by SIGKILL, both happen before that
	// while MaxClockSkew + FenceLatency <= LeaseFenceMargin.
	LeaseFenceMargin = MaxClockSkew + FenceLatency
	// MaxClockSkew is the largest difference between any two nodes' clocks
	// (the operator's, the holder's, a renewer's) under which no two
	// instances accept writes at once. NTP keeps real clusters within
	// milliseconds; a node off by more must not run database pods.
	MaxClockSkew = time.Second
	// FenceLatency bounds the time from the fence's deadline to the last
	// postgres process killed: timer lateness, scheduling, SIGKILL.
	FenceLatency = time.Second
	// HeartbeatDeadline: the holder renews only while a heartbeat commit
	// succeeded within this long, so a hung server or a stalled disk loses
	// the lease like a dead pod.
	HeartbeatDeadline = 1500 * time.Millisecond
	// AnnotationLeaseLSN on the Lease is the holder's WAL position at its
	// last renewal, or its shutdown checkpoint when it released the lease
	// after a clean shutdown; failover measures a candidate's lag against it.
	AnnotationLeaseLSN = "daytwo.dev/lsn"
	// AnnotationHandoverLSN on the Lease, written by a switchover's
	// handover and dropped by the new holder's first renewal, is the old
	// primary's shutdown checkpoint: the new holder is promoted only once it
	// has received WAL up to it.
	AnnotationHandoverLSN = "daytwo.dev/handover-lsn"
	// AnnotationSwitchoverRequest on the Lease is the request time
	// (daytwo.dev/switchover-requested) of the switchover that handed it
	// over, so a request is carried out once even if the status write that
	// answers it is lost.
	AnnotationSwitchoverRequest = "daytwo.dev/switchover-request"
	// AnnotationSync on the Lease is the synchronous_standby_names the
	// holder runs with, recorded at its renewals; failover's quorum rule
	// reads it. While the setting changes it holds the old and the new
	// value, separated by SyncSeparator, and the new value takes effect
	// only once that is recorded, so the record never claims more than the
	// acknowledged commits have. Absent or empty: asynchronous.
	AnnotationSync = "daytwo.dev/synchronous-standby-names"
	SyncSeparator  = "|"
	// AnnotationVouchers on the Lease, written by the holder at each
	// renewal, names (comma-separated) the instances whose promises it
	// needs to serve past its term (see PromiseDuration). The operator
	// promotes only an instance it names; "" names none: the holder is
	// the only instance. Absent (no renewal recorded it yet, or the
	// operator listed no instances): the holder never serves past its
	// term, and any instance may be promoted.
	AnnotationVouchers = "daytwo.dev/vouchers"
	// AnnotationReleasedBy on the Lease, written by the operator as it
	// moves a lease its holder released (a clean shutdown), names that
	// holder: it serves no more, so the promises made to it do not hold
	// the promotion up.
	AnnotationReleasedBy = "daytwo.dev/released-by"
	// AnnotationSourceClaim, on a replica Database's primary Lease, says
	// its source's archive needs no claim before a promotion: "claimed"
	// (the instance promoted first wrote it, after its claim) or "waived"
	// (the operator, for spec.replica.promotion: Unclaimed).
	AnnotationSourceClaim = "daytwo.dev/source-claim"
	// SourceClaimed prefixes AnnotationSourceClaim's value with the claim's
	// time (RFC 3339); SourceClaimWaived is the operator's value.
	SourceClaimed     = "claimed@"
	SourceClaimWaived = "waived"
	// SourceClaimToken prefixes the operator's value for a promotion with
	// spec.replica.promotionToken: the token, encoded. The promoted
	// instance consumes it in the source's archive instead of claiming it.
	SourceClaimToken = "token:"
)

// Serving through a control-plane outage. A holder that cannot renew its
// lease (the API server is down, or cut from it alone) may serve past its
// term only while every other instance of the Database has promised not to
// be promoted: each VouchPeriod, while its heartbeat commits, it asks every
// instance its last renewal named in AnnotationVouchers (POST PathVouch).
// An instance promises only while it does not reach the API server itself
// (its lease watch silent for two renewal periods, and a read of the lease
// failing): when the holder alone is cut off, its peers refuse and the
// operator fails over as before. One that promises refuses to become a
// primary for PromiseDuration from its answer, on its own clock, unless the
// lease says the holder released it (AnnotationReleasedBy) or handed it
// over; and it promises nothing more once it claimed to become one. The holder counts a promise from the
// moment it asked, for PromiseDuration less LeaseFenceMargin (clock rate
// and the fence's own latency), and fences once its term and any promise
// have both run out; it then serves again only under a renewed lease. The
// operator promotes only an instance the lease names in
// AnnotationVouchers, so an instance the holder never asked (one added
// while it was cut off) is never promoted meanwhile. An instance that
// starts keeps the promise its last run recorded on the volume
// (PromiseFile). So when the whole control plane is down, writes go on;
// when the holder is cut off from the API server and its peers are not,
// or it cannot reach a peer, it fences as before. The holder's own
// heartbeat counts like a promise, so a single instance serves while its
// writes commit.
const (
	// VouchPeriod is how often a serving holder asks for promises, and how
	// long an ask may take.
	VouchPeriod = 500 * time.Millisecond
	// VouchReadLimit bounds the lease read by which an asked instance
	// learns whether it reaches the API server (at most one per
	// VouchPeriod): a slower read counts as out of reach.
	VouchReadLimit = 400 * time.Millisecond
	// PromiseDuration is how long an instance refuses promotion after it
	// promised a holder.
	PromiseDuration = 4 * time.Second
	// PromiseFile, in the data volume next to the data directory, records
	// until when (wall clock, RFC 3339) an instance promised, for its next run.
	PromiseFile = "promise"
)

// VouchRequest is the body of POST PathVouch.
type VouchRequest struct {
	// Holder is the lease holder asking.
	Holder string `json:"holder"`
	// LSN is the holder's WAL position as it asks: past its term the
	// Lease's own record (AnnotationLeaseLSN) ages, and failover measures
	// a candidate's lag against the newest of the two.
	LSN string `json:"lsn,omitempty"`
}

// VouchResult answers POST PathVouch: the instance refuses promotion for
// PromiseMillis from its answer.
type VouchResult struct {
	PromiseMillis int64 `json:"promiseMillis"`
}

// LeaseName is the primary lease of the Database named cluster.
func LeaseName(cluster string) string { return cluster + "-primary" }

// HeadlessService is the Service of the Database named cluster that gives
// each instance pod a DNS name, ready or not.
func HeadlessService(cluster string) string { return cluster }

// PeerHost is the DNS name of the instance pod of the Database named
// cluster in namespace, as the server certificate names it. A replica
// clones and streams from the lease holder's PeerHost, so it follows a new
// primary as soon as the lease moves, without waiting for the -rw
// Service's endpoints to change.
func PeerHost(cluster, namespace, pod string) string {
	return pod + "." + HeadlessService(cluster) + "." + namespace + ".svc"
}

// AuthorizationHeader carries "Bearer <token>" on the calls that change an
// instance (promote); the token is the api-token secret file.
const AuthorizationHeader = "Authorization"

// Replication is how replicas follow the primary. The primary's instance
// manager alone sets synchronous_standby_names from it, so the setting
// follows the standbys that stream within a second, operator or not.
type Replication struct {
	// Instances names every instance (pod) of the Database, the primary included.
	Instances []string `json:"instances"`
	// Synchronous is how many replicas must flush a commit before it is
	// acknowledged; 0 is asynchronous replication.
	Synchronous int `json:"synchronous,omitempty"`
	// Required: commits wait for Synchronous replicas even while fewer
	// stream. Otherwise the primary waits only for those that stream.
	Required bool `json:"required,omitempty"`
}

// Archive is where a primary's instance manager ships WAL: exactly one of
// S3 or Directory, under Prefix.
type Archive struct {
	S3 *ArchiveS3 `json:"s3,omitempty"`
	// Directory is a mounted volume's path.
	Directory string `json:"directory,omitempty"`
	// Prefix is the key prefix in the bucket or directory, ending in "/".
	Prefix string `json:"prefix,omitempty"`
	// Parallel is how many files are shipped at once.
	Parallel int `json:"parallel,omitempty"`
}

// StorageFiles are the file names in SecretsDir that one storage's
// credentials and keys are projected under.
type StorageFiles struct {
	AccessKeyID, SecretAccessKey, CA, Token, SeriesKey, EncryptionKey string
}

// ArchiveFiles are the WAL archive's (spec.backup's) files.
var ArchiveFiles = StorageFiles{AccessKeyID: SecretArchiveAccessKeyID, SecretAccessKey: SecretArchiveSecretAccessKey,
	CA: SecretArchiveCA, Token: SecretArchiveToken, SeriesKey: SecretArchiveSeriesKey, EncryptionKey: SecretArchiveEncryptionKey}

// SourceFiles are a replica Database's source archive's files.
var SourceFiles = StorageFiles{AccessKeyID: "source-access-key-id", SecretAccessKey: "source-secret-access-key",
	CA: "source-ca.crt", Token: "source-web-identity-token", SeriesKey: "source-series-key", EncryptionKey: "source-encryption-key"}

// ArchiveS3 is an S3-compatible bucket; static credentials are secret
// files, a web identity token a file of its own.
type ArchiveS3 struct {
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	Region   string `json:"region,omitempty"`
	Insecure bool   `json:"insecure,omitempty"`
	S3Access
}

// ParametersHash identifies the content of a ParametersFile, as the
// instance manager reports it (Status.ConfigHash, Status.StartConfigHash)
// and as the operator renders it.
func ParametersHash(content []byte) string {
	sum := sha256.Sum256(bytes.TrimSpace(content))
	return hex.EncodeToString(sum[:8])
}

// SynchronousStandbyNames is the setting for the primary self given the
// standbys that stream now. With required durability it names every other
// instance, whether it streams or not, so a commit waits for as many
// replicas as asked. Otherwise it asks for no more of them than stream.
// A primary starts with it for no standby streaming, and the operator
// records that on the lease when it moves the lease to a new holder: it
// is what the new holder's commits wait for until it renews.
func SynchronousStandbyNames(r Replication, self string, streaming []string) string {
	var others []string
	for _, name := range r.Instances {
		if name != self {
			others = append(others, name)
		}
	}
	n := min(r.Synchronous, len(others))
	if !r.Required {
		up := 0
		for _, name := range others {
			if slices.Contains(streaming, name) {
				up++
			}
		}
		n = min(n, up)
	}
	if n <= 0 {
		return ""
	}
	quoted := make([]string, len(others))
	for i, name := range others {
		quoted[i] = `"` + name + `"` // pod names: lower-case letters, digits and dashes
	}
	return fmt.Sprintf("ANY %d (%s)", n, strings.Join(quoted, ", "))
}
