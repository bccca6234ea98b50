package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupMethod is how a backup is taken.
// +kubebuilder:validation:Enum=Logical;Physical
type BackupMethod string

const (
	// BackupMethodLogical streams pg_dump in custom format.
	BackupMethodLogical BackupMethod = "Logical"
	// BackupMethodPhysical is continuous backup: the Database archives its
	// WAL to the storage, and each run takes a base backup. Databases
	// bootstrapped from it restore to any point in time the archive covers.
	BackupMethodPhysical BackupMethod = "Physical"
)

// Compression is how a Logical backup is compressed, in Go on the stream
// pg_dump writes.
// +kubebuilder:validation:Enum=none;gzip;zstd
type Compression string

// Compressions.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
)

// MissedRunPolicy says what to do about runs missed while the operator was down.
// +kubebuilder:validation:Enum=RunOnce;Skip
type MissedRunPolicy string

const (
	// MissedRunOnce runs one catch-up backup for any number of missed runs.
	MissedRunOnce MissedRunPolicy = "RunOnce"
	// MissedRunSkip waits for the next scheduled time.
	MissedRunSkip MissedRunPolicy = "Skip"
)

// ConcurrencyPolicy says what happens when a run is due while another is active.
// +kubebuilder:validation:Enum=Forbid;Allow;Replace
type ConcurrencyPolicy string

// Concurrency policies, with the meaning they have on a CronJob.
const (
	ConcurrencyForbid  ConcurrencyPolicy = "Forbid"
	ConcurrencyAllow   ConcurrencyPolicy = "Allow"
	ConcurrencyReplace ConcurrencyPolicy = "Replace"
)

// VerificationResult is the outcome of restoring a backup to prove it works.
// +kubebuilder:validation:Enum=Succeeded;Failed
type VerificationResult string

// Verification results.
const (
	VerificationSucceeded VerificationResult = "Succeeded"
	VerificationFailed    VerificationResult = "Failed"
)

// DatabaseBackup condition types and reasons.
const (
	// ConditionLastRunFailed is True when the latest run failed.
	ConditionLastRunFailed = "LastRunFailed"
	// ConditionBackupStale is True when the newest success is older than maxAge.
	ConditionBackupStale = "BackupStale"
	// ConditionVerified is True when the latest verification restored the backup.
	ConditionVerified = "Verified"
	// ConditionSharedLocation is True when another DatabaseBackup stores in
	// the same bucket and prefix (or volume and path). Series stay apart by
	// UID, so nothing is lost, but the location is harder to reason about.
	ConditionSharedLocation = "SharedLocation"
	// ReasonLocationShared names the other DatabaseBackups at the location.
	ReasonLocationShared = "LocationShared"
	// ReasonSeriesInUse means an older DatabaseBackup writes the series
	// spec.series names at the same location: this one takes no backups.
	ReasonSeriesInUse = "SeriesInUse"
	// ReasonSeriesKeyUnusable: the series key's Secret does not exist
	// (or daytwo's own is gone after backups were taken), or holds no key
	// of a usable size; nothing runs until it does.
	ReasonSeriesKeyUnusable = "SeriesKeyUnusable"
	// ReasonEncryptionKeyUnusable: spec.encryption.keySecretRef names a
	// Secret that does not exist or holds no key of a usable size.
	ReasonEncryptionKeyUnusable = "EncryptionKeyUnusable"
	// ReasonLocationExclusive means no other DatabaseBackup stores there.
	ReasonLocationExclusive = "LocationExclusive"
	// ReasonSuspended means scheduling is suspended.
	ReasonSuspended = "Suspended"
	// ReasonDatabaseNotFound means databaseRef names no Database.
	ReasonDatabaseNotFound = "DatabaseNotFound"
	// ReasonScheduled means backups run on schedule (or the one-shot run is under way or done).
	ReasonScheduled = "Scheduled"
	// ReasonBackupSucceeded means the latest finished run stored a backup.
	ReasonBackupSucceeded = "BackupSucceeded"
	// ReasonBackupFailed means the latest finished run failed; the message says why.
	ReasonBackupFailed = "BackupFailed"
	// ReasonNoRecentBackup means the newest backup is older than maxAge.
	ReasonNoRecentBackup = "NoRecentBackup"
	// ReasonRecentBackup means the newest backup is within maxAge.
	ReasonRecentBackup = "RecentBackup"
	// ReasonVerifying means a verification restore is under way.
	ReasonVerifying = "Verifying"
	// ReasonVerificationSucceeded means the last verification restored a backup and the check query passed.
	ReasonVerificationSucceeded = "VerificationSucceeded"
	// ReasonVerificationFailed means the last verification could not restore or check a backup.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonWaitingForArchiving: a Physical run waits until the Database
	// archives its WAL to the backup's storage.
	ReasonWaitingForArchiving = "WaitingForArchiving"
	// ReasonDatabaseHibernated means a one-shot or requested run waits for
	// its Database to wake (spec.hibernation).
	ReasonDatabaseHibernated = "DatabaseHibernated"
)

// DatabaseBackupSpec is what a user declares for backups of a Database.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.method) || !has(self.method) || oldSelf.method == self.method",message="method cannot change: the stored backups are of the method they were taken with; create another DatabaseBackup"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.series) == has(self.series) && (!has(self.series) || oldSelf.series == self.series)",message="series cannot change: the stored backups are kept under it; create another DatabaseBackup"
// +kubebuilder:validation:XValidation:rule="!(has(self.compression) || has(self.compressionLevel)) || !has(self.method) || self.method == 'Logical'",message="compression applies to Logical backups; Physical base backups and WAL are always zstd"
// +kubebuilder:validation:XValidation:rule="!has(self.compressionLevel) || !has(self.compression) || self.compression == 'zstd' || (self.compression == 'gzip' && self.compressionLevel <= 9)",message="compressionLevel: gzip takes 1 to 9, zstd 1 to 22, none takes no level"
type DatabaseBackupSpec struct {
	// databaseRef names the Database to back up, in the same namespace.
	// +required
	DatabaseRef LocalObjectReference `json:"databaseRef"`

	// series names the series the backups are stored under at the storage
	// location: by default this DatabaseBackup's own UID, so a re-created
	// DatabaseBackup (a new cluster, after a disaster) would see none of
	// the earlier backups. Set it to the earlier DatabaseBackup's
	// status.series to restore from, and go on with, the backups a lost
	// cluster left in the bucket. Only one DatabaseBackup may use a series
	// at a time: two would prune each other's backups. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_-]*$`
	Series string `json:"series,omitempty"`

	// seriesKeySecretRef names the Secret key (default key: key) holding
	// the series key, at least 32 bytes used as they are (openssl rand
	// -hex 32 makes one). daytwo authenticates every manifest it writes
	// with it (HMAC-SHA256), and a restore uses only manifests that
	// verify, and a backup only once all of it matches: whoever can write
	// the bucket cannot change what a restore runs. Without it, daytwo
	// creates Secret <name>-series-key and never deletes it: keep it with
	// status.series, since a restore from the bucket alone needs both. An
	// empty key turns authentication off (to restore backups taken before
	// series keys).
	// +optional
	SeriesKeySecretRef *SecretKeyRef `json:"seriesKeySecretRef,omitempty"`

	// encryption encrypts every backup, and for Physical backups every WAL
	// file, before it leaves the pod (client-side), with a key only the
	// cluster holds. Keep the key: without it nothing restores.
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`

	// schedule is a cron expression (5 fields, or a descriptor such as
	// @daily or "@every 6h"). Empty means one run now.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every ([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$`
	Schedule string `json:"schedule,omitempty"`

	// timeZone is the IANA time zone the schedule is read in; defaults to UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TimeZone *string `json:"timeZone,omitempty"`

	// suspend stops new runs; running ones finish.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// method is how the backup is taken: Logical (pg_dump of the
	// application database) or Physical (continuous WAL archiving plus a
	// base backup per run, for point-in-time recovery). A Database is
	// archived by at most one Physical DatabaseBackup.
	// +optional
	// +kubebuilder:default=Logical
	Method BackupMethod `json:"method,omitempty"`

	// compression is how Logical backups are compressed: none, gzip or
	// zstd (the default when unset). It runs in daytwo on the stream
	// pg_dump writes, in parallel, so it is not bound to pg_dump's
	// single-threaded gzip; restores decompress on the stream too.
	// +optional
	Compression Compression `json:"compression,omitempty"`

	// compressionLevel is the level of compression: gzip 1 (fastest) to 9,
	// zstd 1 to 22 (daytwo's zstd has four speeds: 1, 2-5, 6-9, 10 and up).
	// Unset means gzip 6, or zstd 1 (the fastest: about gzip's size at up
	// to four times pg_dump's speed).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=22
	CompressionLevel *int32 `json:"compressionLevel,omitempty"`

	// storage is where backups are written.
	// +required
	Storage BackupStorage `json:"storage"`

	// retention says which stored backups to keep; the newest successful
	// backup is always kept.
	// +optional
	// +kubebuilder:default={keepLast: 7}
	Retention *BackupRetention `json:"retention,omitempty"`

	// backoffLimit is how many times a failed run is retried.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// activeDeadlineSeconds bounds how long one run may take.
	// +optional
	// +kubebuilder:validation:Minimum=60
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// missedRunPolicy says what happens to runs missed while the operator or
	// the schedule was down: at most one catch-up run, or none.
	// +optional
	// +kubebuilder:default=RunOnce
	MissedRunPolicy MissedRunPolicy `json:"missedRunPolicy,omitempty"`

	// startingDeadlineSeconds is how late a run may start; a later one counts as missed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// concurrencyPolicy says what happens when a run is due while one is active.
	// +optional
	// +kubebuilder:default=Forbid
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// successfulJobsHistoryLimit is how many finished successful Jobs to keep.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// failedJobsHistoryLimit is how many failed Jobs to keep.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// maxAge raises BackupStale when the newest successful backup is older than this, e.g. "26h".
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// verify restores backups into a throwaway instance to prove they work.
	// A Physical backup is restored from its base backup through the WAL
	// archive to its end, which proves the archive has no gap since.
	// +optional
	Verify *BackupVerify `json:"verify,omitempty"`
}

// BackupStorage is where backups are written: exactly one of s3 or pvc.
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.pvc)",message="storage must set exactly one of s3 or pvc"
type BackupStorage struct {
	// s3 is an S3-compatible bucket.
	// +optional
	S3 *S3Storage `json:"s3,omitempty"`

	// pvc is a directory on a PersistentVolumeClaim.
	// +optional
	PVC *PVCStorage `json:"pvc,omitempty"`
}

// S3Storage is an S3-compatible bucket.
// +kubebuilder:validation:XValidation:rule="[has(self.credentialsSecretRef), has(self.webIdentity), has(self.inheritFromEnvironment) && self.inheritFromEnvironment].filter(x, x).size() == 1",message="set exactly one of credentialsSecretRef, webIdentity and inheritFromEnvironment"
// +kubebuilder:validation:XValidation:rule="!has(self.webIdentity) || !has(self.webIdentity.stsEndpoint) || self.webIdentity.stsEndpoint.startsWith('https://') || (has(self.insecure) && self.insecure)",message="webIdentity.stsEndpoint must be https (the token travels to it) unless insecure is set",fieldPath=".webIdentity.stsEndpoint"
type S3Storage struct {
	// endpoint is host[:port] of the S3 API, without a scheme, e.g. "s3.amazonaws.com" or "minio.backup:9000".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	Endpoint string `json:"endpoint"`

	// bucket name.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// prefix is prepended to every key; defaults to <namespace>/<backup name>.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!_.*'()/-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="prefix must not contain '..'"
	Prefix string `json:"prefix,omitempty"`

	// region of the bucket.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`

	// credentialsSecretRef names a Secret with a static access key and
	// secret key. One of credentialsSecretRef, webIdentity and
	// inheritFromEnvironment says where the credentials come from.
	// +optional
	CredentialsSecretRef *S3CredentialsSecretRef `json:"credentialsSecretRef,omitempty"`

	// inheritFromEnvironment takes the credentials from the pods'
	// environment, in the order the AWS SDKs use: AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE
	// and AWS_ROLE_ARN, as EKS's IRSA webhook injects them into pods of an
	// annotated ServiceAccount), container credentials (EKS Pod Identity,
	// ECS), then the node's instance metadata service (the node's own
	// role: ask for it knowingly). The pods that reach the bucket
	// (instances, backup and restore Jobs) run as the Database's
	// ServiceAccount, <database>-instance, which spec.inheritedMetadata
	// annotates.
	// +optional
	InheritFromEnvironment bool `json:"inheritFromEnvironment,omitempty"`

	// webIdentity exchanges a Kubernetes ServiceAccount token for
	// temporary credentials (STS AssumeRoleWithWebIdentity): no static key
	// anywhere. The pods that reach the bucket run as the Database's
	// ServiceAccount, <database>-instance, with a token of the audience
	// asked for; the role must trust the cluster's service-account issuer.
	// +optional
	WebIdentity *S3WebIdentity `json:"webIdentity,omitempty"`

	// serverSideEncryption asks the store to encrypt every object daytwo
	// writes (besides daytwo's own encryption, spec.encryption).
	// +optional
	ServerSideEncryption *S3ServerSideEncryption `json:"serverSideEncryption,omitempty"`

	// insecure uses plain HTTP instead of HTTPS.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// caSecretRef names a Secret key holding the PEM certificates of a
	// private CA the endpoint's certificate chains to (a MinIO or Ceph of
	// your own; default key: ca.crt). Without it, the public CAs daytwo
	// embeds are trusted.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`
}

// S3WebIdentity is how a ServiceAccount token becomes S3 credentials.
type S3WebIdentity struct {
	// roleARN is the role assumed: arn:aws:iam::<account>:role/<name> on
	// AWS, or the RoleARN MinIO prints for its OpenID provider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	RoleARN string `json:"roleARN"`

	// audience of the ServiceAccount token: what the identity provider
	// expects (the client ID of MinIO's OpenID provider).
	// +optional
	// +kubebuilder:default=sts.amazonaws.com
	// +kubebuilder:validation:MaxLength=253
	Audience string `json:"audience,omitempty"`

	// stsEndpoint is the STS URL. Defaults to AWS's regional STS for an
	// amazonaws.com endpoint, and to the S3 endpoint itself otherwise
	// (MinIO and Ceph serve STS beside S3).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$`
	STSEndpoint string `json:"stsEndpoint,omitempty"`
}

// S3ServerSideEncryption is the encryption the store applies to the
// objects daytwo writes.
// +kubebuilder:validation:XValidation:rule="!has(self.kmsKeyID) || self.algorithm == 'aws:kms'",message="kmsKeyID needs algorithm aws:kms"
type S3ServerSideEncryption struct {
	// algorithm is AES256 (SSE-S3, keys the store manages) or aws:kms
	// (SSE-KMS).
	// +required
	// +kubebuilder:validation:Enum=AES256;"aws:kms"
	Algorithm string `json:"algorithm"`

	// kmsKeyID is the KMS key of aws:kms; the bucket's default key
	// without it.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	KMSKeyID string `json:"kmsKeyID,omitempty"`
}

// SecretKeyRef names one key of a Secret in the same namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret; the field that names the Secret says its default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`
}

// S3CredentialsSecretRef names the Secret and keys holding S3 credentials.
type S3CredentialsSecretRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// accessKeyIDKey is the key holding the access key ID.
	// +optional
	// +kubebuilder:default=AWS_ACCESS_KEY_ID
	// +kubebuilder:validation:MaxLength=253
	AccessKeyIDKey string `json:"accessKeyIDKey,omitempty"`

	// secretAccessKeyKey is the key holding the secret access key.
	// +optional
	// +kubebuilder:default=AWS_SECRET_ACCESS_KEY
	// +kubebuilder:validation:MaxLength=253
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
}

// PVCStorage is a directory on a PersistentVolumeClaim.
type PVCStorage struct {
	// claimName of the PersistentVolumeClaim.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`

	// path is the directory inside the volume; defaults to <backup name>.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="path must be relative and must not contain '..'"
	Path string `json:"path,omitempty"`
}

// BackupRetention is a grandfather-father-son policy. A backup is kept when
// any rule keeps it.
// +kubebuilder:validation:XValidation:rule="(has(self.keepLast) ? self.keepLast : 0) + (has(self.keepDaily) ? self.keepDaily : 0) + (has(self.keepWeekly) ? self.keepWeekly : 0) + (has(self.keepMonthly) ? self.keepMonthly : 0) > 0",message="retention must keep at least one backup"
type BackupRetention struct {
	// keepLast keeps the newest N backups.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	KeepLast int32 `json:"keepLast,omitempty"`

	// keepDaily keeps the newest backup of each of the last N days.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	KeepDaily int32 `json:"keepDaily,omitempty"`

	// keepWeekly keeps the newest backup of each of the last N ISO weeks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	KeepWeekly int32 `json:"keepWeekly,omitempty"`

	// keepMonthly keeps the newest backup of each of the last N months.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	KeepMonthly int32 `json:"keepMonthly,omitempty"`
}

// BackupVerify restores backups into a throwaway instance: after every N-th
// success, or on a schedule of its own. Exactly one is set.
// +kubebuilder:validation:XValidation:rule="has(self.everyNth) != has(self.schedule)",message="verify must set exactly one of everyNth or schedule"
type BackupVerify struct {
	// everyNth verifies after every N-th successful backup.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	EveryNth *int32 `json:"everyNth,omitempty"`

	// schedule is a cron expression for verification runs.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every ([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$`
	Schedule string `json:"schedule,omitempty"`

	// query is the check run against the restored database; it must return
	// at least one row. Defaults to a count of user tables.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query,omitempty"`
}

// StoredBackup is one complete backup (one with a manifest) in storage.
type StoredBackup struct {
	// id of the backup, unique within the storage prefix.
	// +required
	ID string `json:"id"`
	// time the backup finished.
	// +required
	Time metav1.Time `json:"time"`
	// sizeBytes of the stored dump.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// sha256 of the stored dump, hex encoded.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// pgVersion of the server that was dumped.
	// +optional
	PGVersion string `json:"pgVersion,omitempty"`
}

// BackupEncryption says how backups are encrypted.
type BackupEncryption struct {
	// keySecretRef names the Secret key (default key: key) holding the
	// encryption key, at least 32 bytes used as they are (openssl rand
	// -hex 32 makes one). Each object gets a key of its own derived from
	// it; the stream is minio/sio's DARE 2.0 (AES-256-GCM or
	// ChaCha20-Poly1305). Backups taken before it was set stay readable.
	// +required
	KeySecretRef SecretKeyRef `json:"keySecretRef"`
}

// Recoverability is the span a restore can reach.
type Recoverability struct {
	// firstPoint is the oldest point a restore can reach: where the oldest
	// retained backup restores to (a Logical backup's start, when pg_dump
	// took its snapshot; a Physical base backup's end, when it became
	// consistent).
	// +required
	FirstPoint metav1.Time `json:"firstPoint"`

	// lastPoint is the newest. For Logical backups it is the newest
	// backup's start. For Physical backups it is when the newest WAL
	// segment was archived (kept current from the Database while it
	// archives to this DatabaseBackup): transactions committed since are
	// in the segment being written, archived at most a minute later. It is
	// an upload time: while archiving catches up on a backlog (the
	// Database's ContinuousArchiving condition counts the files waiting),
	// the WAL archived is older than it.
	// +required
	LastPoint metav1.Time `json:"lastPoint"`
}

// BackupVerification is the outcome of the latest verification.
type BackupVerification struct {
	// time the verification finished.
	// +required
	Time metav1.Time `json:"time"`
	// backupID that was restored.
	// +required
	BackupID string `json:"backupID"`
	// result of the restore and check query.
	// +required
	Result VerificationResult `json:"result"`
	// restoreSeconds is how long the restore took.
	// +optional
	RestoreSeconds int64 `json:"restoreSeconds,omitempty"`
	// message says why a verification failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// DatabaseBackupStatus is what daytwo observed about a DatabaseBackup.
type DatabaseBackupStatus struct {
	// conditions are Ready, LastRunFailed, BackupStale and Verified.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// series is the series the backups are stored under (spec.series, or
	// this DatabaseBackup's UID): record it, to find the backups again
	// from the bucket alone (spec.series of a new DatabaseBackup).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Series string `json:"series,omitempty"`

	// lastScheduleTime is when the latest run was started.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// nextScheduleTime is when the next run is due.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// lastBackupTime is when the newest successful backup finished.
	// +optional
	LastBackupTime *metav1.Time `json:"lastBackupTime,omitempty"`

	// lastFailureTime is when the latest failed run ended.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`

	// activeJobs are the names of the running backup Jobs.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ActiveJobs []string `json:"activeJobs,omitempty"`

	// recoverability is the span a restore from this series can reach
	// (the point-in-time recovery window of a Physical series).
	// +optional
	Recoverability *Recoverability `json:"recoverability,omitempty"`

	// backups are the retained backups, newest first (at most 50 listed).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	Backups []StoredBackup `json:"backups,omitempty"`

	// prunedTotal is how many backups retention has deleted.
	// +optional
	PrunedTotal int64 `json:"prunedTotal,omitempty"`

	// successesSinceVerification counts successful runs since the last
	// verification; verify.everyNth compares against it.
	// +optional
	SuccessesSinceVerification int32 `json:"successesSinceVerification,omitempty"`

	// lastVerification is the outcome of the latest restore test.
	// +optional
	LastVerification *BackupVerification `json:"lastVerification,omitempty"`
}

// DatabaseBackup schedules logical backups of a Database to S3-compatible
// storage or a volume, prunes them by retention and verifies they restore.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dbb,categories=daytwo
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.databaseRef.name`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last Backup",type=date,JSONPath=`.status.lastBackupTime`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DatabaseBackup struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec DatabaseBackupSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status DatabaseBackupStatus `json:"status,omitempty"`
}

// DatabaseBackupList is a list of DatabaseBackups.
//
// +kubebuilder:object:root=true
type DatabaseBackupList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DatabaseBackup `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &DatabaseBackup{}, &DatabaseBackupList{})
}
