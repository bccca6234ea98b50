package v1alpha1

import (
	"cmp"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DatabaseSize is a tier that sets instances, resources and storage at once.
// +kubebuilder:validation:Enum=small;medium;large
type DatabaseSize string

const (
	// SizeSmall is 1 instance, 1 CPU, 1Gi memory, 10Gi storage.
	SizeSmall DatabaseSize = "small"
	// SizeMedium is 2 instances, 2 CPU, 4Gi memory, 50Gi storage.
	SizeMedium DatabaseSize = "medium"
	// SizeLarge is 3 instances, 4 CPU, 16Gi memory, 200Gi storage.
	SizeLarge DatabaseSize = "large"
)

// DatabaseDeletionPolicy says what happens to a Database's data when it is deleted.
// +kubebuilder:validation:Enum=Delete;Retain;Snapshot;Orphan
type DatabaseDeletionPolicy string

const (
	// DatabaseDeletionDelete removes everything, volumes included.
	DatabaseDeletionDelete DatabaseDeletionPolicy = "Delete"
	// DatabaseDeletionRetain keeps the volumes and the credentials Secret.
	DatabaseDeletionRetain DatabaseDeletionPolicy = "Retain"
	// DatabaseDeletionSnapshot takes a final backup to spec.backupStorage, then deletes.
	DatabaseDeletionSnapshot DatabaseDeletionPolicy = "Snapshot"
	// DatabaseDeletionOrphan disconnects the Database from daytwo: the
	// instances keep running, with their volumes, Services, Secrets and
	// Lease, released from the Database; nothing fails them over or rolls
	// them any more. A Database of the same name with the annotation
	// daytwo.dev/adopt: "true" takes them back.
	DatabaseDeletionOrphan DatabaseDeletionPolicy = "Orphan"
)

// DatabasePhase is a one-word summary for `kubectl get`; conditions are the contract.
type DatabasePhase string

// Database phases.
const (
	DatabasePhaseCreating  DatabasePhase = "Creating"
	DatabasePhaseReady     DatabasePhase = "Ready"
	DatabasePhaseUpgrading DatabasePhase = "Upgrading"
	DatabasePhaseDegraded  DatabasePhase = "Degraded"
	DatabasePhaseDeleting  DatabasePhase = "Deleting"
	// DatabasePhaseHibernated: spec.hibernation is On; the instances stop,
	// or have stopped, and their volumes are kept.
	DatabasePhaseHibernated DatabasePhase = "Hibernated"
	// DatabasePhaseReplica: spec.replica.enabled; the instances follow
	// the source, read-only.
	DatabasePhaseReplica DatabasePhase = "Replica"
)

// ParameterSource says where an effective PostgreSQL parameter value came from.
// +kubebuilder:validation:Enum=Tuned;User;Default
type ParameterSource string

// Parameter sources.
const (
	ParameterTuned   ParameterSource = "Tuned"
	ParameterUser    ParameterSource = "User"
	ParameterDefault ParameterSource = "Default"
)

// Database condition types and reasons.
const (
	// ConditionPendingRestart is True when a changed parameter needs a restart to apply.
	ConditionPendingRestart = "PendingRestart"
	// ConditionUpgradeFailed is True when a version change was rolled back.
	ConditionUpgradeFailed = "UpgradeFailed"
	// ConditionReconcilePaused is True while the annotation
	// daytwo.dev/reconcile pauses daytwo's work on the Database.
	ConditionReconcilePaused = "ReconcilePaused"
	// ConditionFenced is True while spec.fencedInstances fences instances.
	ConditionFenced = "Fenced"
	// ReasonMajorUpgradeFailed means a major upgrade failed and the
	// instances run the old version on the data as it was.
	ReasonMajorUpgradeFailed = "MajorUpgradeFailed"
	// ConditionServerCertificate is True while the instances serve a valid
	// certificate; its message says which Secret holds it and when it
	// expires.
	ConditionServerCertificate = "ServerCertificate"
	// ReasonCertificateValid: the served certificate is valid.
	ReasonCertificateValid = "CertificateValid"
	// ReasonCertificateInvalid: the Secret spec.tls.serverCertificate
	// names is missing or holds a certificate daytwo's clients would
	// refuse; a Database without instances yet waits for it.
	ReasonCertificateInvalid = "CertificateInvalid"
	// ReasonRestoreFailed means bootstrap from a backup could not complete.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonImportFailed means bootstrap.import could not complete; the
	// primary retries it from the start.
	ReasonImportFailed = "ImportFailed"
	// ReasonDataConflict means the primary's volume holds data another
	// Database made and the spec asks for another bootstrap; see
	// AnnotationReuseData.
	ReasonDataConflict = "DataConflict"
	// ConditionContinuousArchiving, present while a Physical DatabaseBackup
	// archives the Database's WAL, is True while the primary ships it.
	ConditionContinuousArchiving = "ContinuousArchiving"
	// ReasonArchiving, ReasonArchivingStarting and ReasonArchivingFailed
	// are its reasons.
	ReasonArchiving         = "Archiving"
	ReasonArchivingStarting = "ArchivingStarting"
	ReasonArchivingFailed   = "ArchivingFailed"
	// ConditionStorageResizePending is True while the volumes are smaller
	// than spec asks and daytwo cannot (yet) grow them; volumes larger than
	// spec (a shrink) stay so for good, False with reason ShrinkUnsupported.
	ConditionStorageResizePending = "StorageResizePending"

	// ReasonRestartRequired means changed settings wait for a rolling restart.
	ReasonRestartRequired = "RestartRequired"
	// ReasonUpToDate means every instance runs what the spec asks for.
	ReasonUpToDate = "UpToDate"
	// ReasonPrimaryNotReady means the primary does not accept connections.
	ReasonPrimaryNotReady = "PrimaryNotReady"
	// ReasonHibernated means spec.hibernation is On and no instance runs.
	ReasonHibernated = "Hibernated"
	// ReasonFollowingSource means the Database is a replica of another
	// (spec.replica.enabled): ready when an instance follows it.
	ReasonFollowingSource = "FollowingSource"
	// ReasonPromoting means spec.replica.enabled turned false, and no
	// instance is promoted yet.
	ReasonPromoting = "Promoting"
	// ReasonSuperseded means another Database was promoted from this
	// one's WAL archive (or from its source's): none of its instances
	// serves as primary again.
	ReasonSuperseded = "Superseded"
	// ReasonHibernating means spec.hibernation is On and the instances
	// are stopping (the primary first moves to the first instance).
	ReasonHibernating = "Hibernating"
	// ReasonReconcilePaused means the annotation daytwo.dev/reconcile is
	// "paused": daytwo leaves the Database as it is.
	ReasonReconcilePaused = "ReconcilePaused"
	// ReasonFencedOnRequest means spec.fencedInstances fences instances.
	ReasonFencedOnRequest = "FencedOnRequest"
	// ReasonExpansionUnsupported means the StorageClass does not allow volume expansion.
	ReasonExpansionUnsupported = "ExpansionUnsupported"
	// ReasonShrinkUnsupported means spec asks for smaller volumes; volumes never shrink.
	ReasonShrinkUnsupported = "ShrinkUnsupported"
	// ReasonResizing means daytwo asked for bigger volumes and waits for them.
	ReasonResizing = "Resizing"
	// ReasonDeleting means the Database is being deleted.
	ReasonDeleting = "Deleting"
	// ReasonFailingOver means the primary lease expired and daytwo is
	// promoting a replica, or waits for one it may promote.
	ReasonFailingOver = "FailingOver"
	// ReasonServingOnPromises means the primary cannot renew its lease (it
	// does not reach the Kubernetes API) and serves on its replicas'
	// promises not to be promoted meanwhile.
	ReasonServingOnPromises = "ServingOnPromises"
	// ReasonFailover is the Event reason of each failover step.
	ReasonFailover = "Failover"
	// ReasonSwitchoverPending means a requested switchover waits until the
	// Database allows one (Progressing=True); the message says why.
	ReasonSwitchoverPending = "SwitchoverPending"
	// ReasonSwitchover is the Event reason of each switchover step.
	ReasonSwitchover = "Switchover"
	// ReasonSwitchingOver means a switchover is under way
	// (Progressing=True): status.targetPrimary names the instance it
	// promotes.
	ReasonSwitchingOver = "SwitchingOver"
)

// Parameters are postgresql.conf settings by name. To Go code it is a
// map[string]string: ParameterValue, an alias, only carries the schema of
// each value.
// +kubebuilder:validation:MaxProperties=64
// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9_.]*$'))",message="parameter names must be lower-case postgresql.conf names"
// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['listen_addresses', 'port', 'unix_socket_directories', 'unix_socket_group', 'unix_socket_permissions', 'data_directory', 'config_file', 'hba_file', 'ident_file', 'external_pid_file', 'cluster_name', 'include', 'include_dir', 'include_if_exists', 'archive_mode', 'archive_command', 'archive_library', 'archive_cleanup_command', 'restore_command', 'recovery_end_command', 'recovery_target', 'recovery_target_action', 'recovery_target_inclusive', 'recovery_target_lsn', 'recovery_target_name', 'recovery_target_time', 'recovery_target_timeline', 'recovery_target_xid', 'primary_conninfo', 'primary_slot_name', 'promote_trigger_file', 'ssl', 'ssl_ca_file', 'ssl_cert_file', 'ssl_crl_dir', 'ssl_crl_file', 'ssl_dh_params_file', 'ssl_key_file', 'ssl_passphrase_command', 'krb_server_keyfile', 'logging_collector', 'log_directory', 'log_filename', 'log_destination', 'syslog_facility', 'syslog_ident', 'full_page_writes', 'wal_level', 'wal_log_hints', 'hot_standby', 'synchronous_standby_names', 'allow_system_table_mods', 'dynamic_library_path', 'local_preload_libraries', 'session_preload_libraries', 'jit_provider']))",messageExpression="'parameters must not set a setting daytwo manages: ' + self.filter(k, k in ['listen_addresses', 'port', 'unix_socket_directories', 'unix_socket_group', 'unix_socket_permissions', 'data_directory', 'config_file', 'hba_file', 'ident_file', 'external_pid_file', 'cluster_name', 'include', 'include_dir', 'include_if_exists', 'archive_mode', 'archive_command', 'archive_library', 'archive_cleanup_command', 'restore_command', 'recovery_end_command', 'recovery_target', 'recovery_target_action', 'recovery_target_inclusive', 'recovery_target_lsn', 'recovery_target_name', 'recovery_target_time', 'recovery_target_timeline', 'recovery_target_xid', 'primary_conninfo', 'primary_slot_name', 'promote_trigger_file', 'ssl', 'ssl_ca_file', 'ssl_cert_file', 'ssl_crl_dir', 'ssl_crl_file', 'ssl_dh_params_file', 'ssl_key_file', 'ssl_passphrase_command', 'krb_server_keyfile', 'logging_collector', 'log_directory', 'log_filename', 'log_destination', 'syslog_facility', 'syslog_ident', 'full_page_writes', 'wal_level', 'wal_log_hints', 'hot_standby', 'synchronous_standby_names', 'allow_system_table_mods', 'dynamic_library_path', 'local_preload_libraries', 'session_preload_libraries', 'jit_provider'])[0]"
type Parameters map[string]ParameterValue

// ParameterValue is the value of one postgresql.conf setting. PostgreSQL's
// config file cannot hold a control character such as a newline and reads
// a backslash as an escape, so neither is accepted; the length bound keeps
// the CEL rules within the API server's cost budget.
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\x00-\x1f\x7f]')`,message="parameter values must not contain a control character (such as a newline or a tab)"
// +kubebuilder:validation:XValidation:rule=`!self.contains('\\')`,message="parameter values must not contain a backslash"
type ParameterValue = string

// DeepCopyInto copies the settings into out. It is written by hand because
// controller-gen's deepcopy cannot copy a map whose values are an alias.
func (in Parameters) DeepCopyInto(out *Parameters) { *out = maps.Clone(in) }

// DeepCopy returns a copy of the settings.
func (in Parameters) DeepCopy() Parameters { return maps.Clone(in) }

// DatabaseSpec is what a user declares for a PostgreSQL database.
// +kubebuilder:validation:XValidation:rule="self.deletionPolicy != 'Snapshot' || has(self.backupStorage) || has(self.backup)",message="deletionPolicy Snapshot needs spec.backupStorage or spec.backup to hold the final backup"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.bootstrap) == has(self.bootstrap)",message="bootstrap is immutable"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.replica) || !has(self.replica) || self.replica.enabled",message="spec.replica: set on a running Database it demotes it, so enabled must be true",fieldPath=".replica"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.replica) || has(self.replica)",message="spec.replica cannot be removed: set spec.replica.enabled to false to promote",fieldPath=".replica"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.replica) || !has(self.bootstrap) || has(self.bootstrap.initdb)",message="spec.bootstrap: a replica Database takes its data from spec.replica.source; fromBackup and import do not apply",fieldPath=".bootstrap",optionalOldSelf=true
// +kubebuilder:validation:XValidation:rule="!has(self.replication) || !has(self.replication.synchronous) || !has(self.instances) || self.replication.synchronous.number < self.instances",message="spec.replication.synchronous.number must be below spec.instances: the primary does not count"
type DatabaseSpec struct {
	// version is the PostgreSQL major version.
	// +required
	// +kubebuilder:validation:Enum="13";"14";"15";"16";"17";"18"
	// +kubebuilder:validation:XValidation:rule="int(self) >= int(oldSelf)",message="version must not go down: PostgreSQL cannot be downgraded in place"
	Version string `json:"version"`

	// image overrides the PostgreSQL image. It must be an image of the same
	// major version; changing it is how a minor upgrade is asked for.
	// Defaults to the release daytwo pins for the version
	// (postgres:17.12 for 17). A digest (name@sha256:<hex>, with or
	// without a tag) pins it.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s@]+(@sha256:[a-f0-9]{64})?$`
	Image string `json:"image,omitempty"`

	// size is the tier that sets instances, resources and storage; explicit
	// instances, resources and storage override it.
	// +optional
	// +kubebuilder:default=small
	Size DatabaseSize `json:"size,omitempty"`

	// instances overrides the tier's number of PostgreSQL pods.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	Instances *int32 `json:"instances,omitempty"`

	// resources overrides the tier's CPU and memory for each instance.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// storage overrides the tier's volume for each instance.
	// +optional
	Storage *DatabaseStorage `json:"storage,omitempty"`

	// parameters are postgresql.conf settings; they win over tuned values.
	// Settings daytwo manages are refused: where the server listens and
	// finds its files, include directives, archiving, recovery and
	// replication, TLS and Kerberos files, cluster_name and logging to files
	// (the server logs to stderr). The config file cannot carry a value with
	// a control character or a backslash, so those are refused too.
	// +optional
	Parameters Parameters `json:"parameters,omitempty"`

	// bootstrap says how the first instance gets its data. Immutable.
	// +optional
	// +kubebuilder:default={initdb: {}}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bootstrap is immutable"
	Bootstrap *DatabaseBootstrap `json:"bootstrap,omitempty"`

	// backupStorage is where deletionPolicy Snapshot writes the final
	// backup; without it, spec.backup.storage.
	// +optional
	BackupStorage *BackupStorage `json:"backupStorage,omitempty"`

	// backup declares this Database's backups in place: daytwo manages a
	// DatabaseBackup named <name>-backup from it (removing backup deletes
	// that object, never the stored backups). The default method is
	// Physical: WAL archiving, a base backup per run, and point-in-time
	// recovery. A standalone DatabaseBackup works as well.
	// +optional
	Backup *DatabaseBackupPolicy `json:"backup,omitempty"`

	// deletionPolicy says what happens to the data when the Database is deleted.
	// +optional
	// +kubebuilder:default=Retain
	DeletionPolicy DatabaseDeletionPolicy `json:"deletionPolicy,omitempty"`

	// replication says how replicas follow the primary. Without it they
	// stream asynchronously.
	// +optional
	Replication *DatabaseReplication `json:"replication,omitempty"`

	// tls says which certificate the instances serve. Every network
	// connection to a Database uses TLS, always: without this field daytwo
	// issues the certificate from a CA of the Database's own.
	// +optional
	TLS *DatabaseTLS `json:"tls,omitempty"`

	// roles are PostgreSQL roles daytwo makes and keeps as declared, one
	// per service say, or a read-only one for analytics (inRoles:
	// [pg_read_all_data]). status.roles says where each stands.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Roles []DatabaseRole `json:"roles,omitempty"`

	// databases are databases inside the server, each with its owner,
	// schemas and extensions; the application database may be listed for
	// its schemas and extensions. status.databases says where each stands.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Databases []LogicalDatabase `json:"databases,omitempty"`

	// hibernation On stops every instance and keeps its volume: a Database
	// that costs nothing but storage until hibernation is Off again, when
	// the instances start where they stopped. The primary first moves to
	// the first instance (<name>-0), which starts first on waking.
	// Scheduled backups skip their runs meanwhile.
	// +optional
	Hibernation HibernationMode `json:"hibernation,omitempty"`

	// fencedInstances fences instances for forensics: each named instance
	// (<name>-<ordinal>), or every one for "*", stops PostgreSQL and keeps
	// it stopped while its pod runs on (exec into it, read its data). A
	// fenced primary stops serving, and failover promotes an instance
	// that is not fenced. Removing an instance lifts its fence: it starts
	// again, as a replica when another was promoted meanwhile.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=9
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	FencedInstances []string `json:"fencedInstances,omitempty"`

	// maintenance holds planned restarts of the primary (a restart-only
	// setting, a new image) for a window; without it they happen at once.
	// +optional
	Maintenance *DatabaseMaintenance `json:"maintenance,omitempty"`

	// pooler runs PgBouncer in front of the Database: many client
	// connections on few server connections, and switchovers that
	// clients do not see. Removing it removes the pools.
	// +optional
	Pooler *PoolerSpec `json:"pooler,omitempty"`

	// placement says where the instances run (a node pool through
	// nodeSelector and tolerations), how they keep apart and their
	// priority. The pooler's pods follow its nodeSelector, tolerations
	// and priorityClassName. A change restarts the instances one at a
	// time, the primary last, as a restart-only setting does.
	// +optional
	Placement *DatabasePlacement `json:"placement,omitempty"`

	// inheritedMetadata is labels and annotations added to the instances'
	// and the pooler's pods and to the instances' ServiceAccount (where
	// a workload-identity annotation goes).
	// +optional
	InheritedMetadata *PodMetadata `json:"inheritedMetadata,omitempty"`

	// imagePullSecrets name Secrets the instances' and the pooler's images
	// are pulled with.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// services says how the -rw and -ro Services are exposed: a
	// LoadBalancer, say, for clients outside the cluster.
	// +optional
	Services *DatabaseServices `json:"services,omitempty"`

	// replica makes this Database a read-only replica of another one, in
	// another namespace or cluster, for disaster recovery: it bootstraps
	// from the source's base backup and follows its WAL until promoted
	// (enabled: false). It can only be set when the Database is created.
	// +optional
	Replica *DatabaseReplica `json:"replica,omitempty"`

	// ha tunes how fast a lost primary is replaced: its lease's term and
	// a delay before failover. The defaults suit a cluster whose API
	// server answers within a second; a slow or distant one wants longer.
	// +optional
	HA *DatabaseHA `json:"ha,omitempty"`
}

// DatabaseTLS is spec.tls.
type DatabaseTLS struct {
	// serverCertificate names a Secret in the Database's namespace with
	// tls.crt, tls.key and ca.crt (as cert-manager writes one), served
	// instead of the certificate daytwo issues. Its certificate must name
	// the Database's Services (<name>-rw, <name>-ro and the
	// headless <name>, with .<namespace>.svc) and its pods
	// (*.<name>.<namespace>.svc); clients verify it against ca.crt. A
	// renewed Secret is loaded without a restart.
	// +optional
	ServerCertificate *LocalObjectReference `json:"serverCertificate,omitempty"`
}

// DatabaseBackupPolicy is spec.backup: the DatabaseBackup daytwo manages
// for a Database. The fields mean what they mean on a DatabaseBackup.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.method) || !has(self.method) || oldSelf.method == self.method",message="method cannot change: remove spec.backup, then add it with the other method"
// +kubebuilder:validation:XValidation:rule="!(has(self.compression) || has(self.compressionLevel)) || !has(self.method) || self.method == 'Logical'",message="compression applies to Logical backups; Physical base backups and WAL are always zstd"
// +kubebuilder:validation:XValidation:rule="!has(self.compressionLevel) || !has(self.compression) || self.compression == 'zstd' || (self.compression == 'gzip' && self.compressionLevel <= 9)",message="compressionLevel: gzip takes 1 to 9, zstd 1 to 22, none takes no level"
type DatabaseBackupPolicy struct {
	// schedule is a cron expression or a descriptor; defaults to @daily.
	// +optional
	// +kubebuilder:default="@daily"
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every ([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$`
	Schedule string `json:"schedule,omitempty"`

	// timeZone is the IANA time zone the schedule is read in; defaults to UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TimeZone *string `json:"timeZone,omitempty"`

	// method is Physical (the default: WAL archiving and base backups,
	// for point-in-time recovery) or Logical (pg_dump).
	// +optional
	// +kubebuilder:default=Physical
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

	// storage is where backups and WAL are written.
	// +required
	Storage BackupStorage `json:"storage"`

	// encryption encrypts backups and WAL client-side (see the
	// DatabaseBackup's spec.encryption).
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`

	// retention says which stored backups to keep.
	// +optional
	// +kubebuilder:default={keepLast: 7}
	Retention *BackupRetention `json:"retention,omitempty"`

	// maxAge raises BackupStale when the newest backup is older than this.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// verify restores backups into a throwaway instance to prove them (a
	// Physical one: its base backup and the WAL archive to its end).
	// +optional
	Verify *BackupVerify `json:"verify,omitempty"`

	// suspend stops new runs.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// DatabaseReplication says how replicas follow the primary.
type DatabaseReplication struct {
	// synchronous makes each commit wait until replicas have flushed it.
	// +optional
	Synchronous *SynchronousReplication `json:"synchronous,omitempty"`
}

// SynchronousReplication makes a commit wait for replicas:
// synchronous_standby_names = 'ANY <number> (<the other instances>)'.
type SynchronousReplication struct {
	// number of replicas that must have flushed a commit before it is
	// acknowledged. It must be below the number of instances.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	Number int32 `json:"number"`

	// dataDurability is preferred or required. With required, commits wait for number replicas even
	// when fewer stream (writes stop rather than risk a loss), and a
	// failover promotes only a replica that holds every acknowledged
	// commit. With preferred, the primary waits only for the replicas that
	// stream, so writes go on without them, and a failover may lose what
	// only the primary had, as with asynchronous replication.
	// +optional
	// +kubebuilder:default=required
	DataDurability DataDurability `json:"dataDurability,omitempty"`
}

// DataDurability chooses between waiting for replicas and staying writable.
// +kubebuilder:validation:Enum=required;preferred
type DataDurability string

const (
	// DataDurabilityRequired makes commits wait for the synchronous replicas.
	DataDurabilityRequired DataDurability = "required"
	// DataDurabilityPreferred lets commits go on without them when too few stream.
	DataDurabilityPreferred DataDurability = "preferred"
)

// DatabaseStorage is the persistent volume of each instance.
type DatabaseStorage struct {
	// size of the volume. It can grow but never shrink.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName of the volume; empty means the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// DatabaseBootstrap says how the first instance gets its data: exactly one of
// initdb, fromBackup or import.
// +kubebuilder:validation:XValidation:rule="[has(self.initdb), has(self.fromBackup), has(self.__import__)].filter(x, x).size() == 1",message="bootstrap must set exactly one of initdb, fromBackup or import"
type DatabaseBootstrap struct {
	// initdb creates an empty cluster with one application database.
	// +optional
	InitDB *BootstrapInitDB `json:"initdb,omitempty"`

	// fromBackup restores a backup made by a DatabaseBackup.
	// +optional
	FromBackup *BootstrapFromBackup `json:"fromBackup,omitempty"`

	// import copies databases and roles from a running PostgreSQL outside
	// daytwo (or another Database, for a blue/green major upgrade) with
	// pg_dump and pg_restore of this image's version.
	// +optional
	Import *BootstrapImport `json:"import,omitempty"`
}

// BootstrapImport reads an existing PostgreSQL.
type BootstrapImport struct {
	// host of the source server (a DNS name or an address).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$`
	Host string `json:"host"`

	// port of the source server.
	// +optional
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// databases to copy, each into a database of the same name.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z_][A-Za-z0-9_$-]*$`
	Databases []string `json:"databases"`

	// roles copies the roles first (with their passwords when the source
	// user may read them, as a superuser may), so objects keep their owners
	// and grants. Without it, the application owner owns everything.
	// +optional
	// +kubebuilder:default=true
	Roles *bool `json:"roles,omitempty"`

	// credentialsSecret holds the keys username and password of the source
	// user. They reach the import as environment, never as arguments.
	// +required
	CredentialsSecret LocalObjectReference `json:"credentialsSecret"`
}

// BootstrapInitDB creates an empty cluster.
type BootstrapInitDB struct {
	// database is the application database to create.
	// +optional
	// +kubebuilder:default=app
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Database string `json:"database,omitempty"`

	// owner is the role that owns the application database; its password is
	// generated into the credentials Secret.
	// +optional
	// +kubebuilder:default=app
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'postgres'",message="owner must not be the superuser postgres"
	Owner string `json:"owner,omitempty"`
}

// BootstrapFromBackup restores a stored backup into a new Database.
// +kubebuilder:validation:XValidation:rule="!has(self.targetTime) || !has(self.targetLSN)",message="set targetTime or targetLSN, not both"
type BootstrapFromBackup struct {
	// backupRef names the DatabaseBackup whose storage holds the backup.
	// +required
	BackupRef LocalObjectReference `json:"backupRef"`

	// backupID picks one stored backup; empty means the newest (for a
	// Physical backup: the newest that finished before the target).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	BackupID string `json:"backupID,omitempty"`

	// targetTime recovers to this moment (RFC 3339): the restored database
	// holds every transaction committed up to it, and none after. Physical
	// backups only. Without targetTime or targetLSN, a Physical restore
	// replays to the end of the archive.
	// +optional
	TargetTime *metav1.Time `json:"targetTime,omitempty"`

	// targetLSN recovers up to this WAL position, e.g. "0/3000060".
	// Physical backups only.
	// +optional
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`
	TargetLSN string `json:"targetLSN,omitempty"`
}

// EffectiveParameter is one postgresql.conf setting as the instance runs it.
type EffectiveParameter struct {
	// name of the setting.
	// +required
	Name string `json:"name"`
	// value of the setting.
	// +required
	Value string `json:"value"`
	// source says whether daytwo tuned the value or the user set it.
	// +required
	Source ParameterSource `json:"source"`
}

// InstanceStatus is one PostgreSQL instance as its instance manager reports it.
type InstanceStatus struct {
	// name of the pod.
	// +required
	Name string `json:"name"`
	// role is primary or replica.
	// +optional
	Role string `json:"role,omitempty"`
	// postgresVersion is the server_version the instance runs.
	// +optional
	PostgresVersion string `json:"postgresVersion,omitempty"`
	// lsn is the instance's WAL position when it was last asked.
	// +optional
	LSN string `json:"lsn,omitempty"`
	// receivedLSN is the WAL a replica has received, replayed or not.
	// +optional
	ReceivedLSN string `json:"receivedLSN,omitempty"`
	// timeline is the timeline the instance runs on.
	// +optional
	Timeline int32 `json:"timeline,omitempty"`
	// streaming is true on a replica that streams from the primary.
	// +optional
	Streaming bool `json:"streaming,omitempty"`
	// pendingRestart names settings PostgreSQL says wait for a restart.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	PendingRestart []string `json:"pendingRestart,omitempty"`
	// promisedTo names the primary this instance promised not to be
	// promoted over while it lasts: the primary serves on such promises
	// when it cannot renew its lease (a control-plane outage).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PromisedTo string `json:"promisedTo,omitempty"`
	// fencedOnRequest is true while spec.fencedInstances fences the
	// instance and it says so; it is never promoted.
	// +optional
	FencedOnRequest bool `json:"fencedOnRequest,omitempty"`
	// superseded names the Database that was promoted from this one's WAL
	// archive (or from the source this replica follows): the instance
	// never serves as primary.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Superseded string `json:"superseded,omitempty"`
	// error says why the instance could not be asked.
	// +optional
	Error string `json:"error,omitempty"`
}

// FailoverRecord is one failover, step by step.
type FailoverRecord struct {
	// from is the instance that lost the primary lease.
	// +required
	From string `json:"from"`
	// to is the replica promoted.
	// +required
	To string `json:"to"`
	// reason says why the old primary was given up.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
	// fencedTime is when the old primary could no longer serve writes: the
	// end of its last lease renewal less the fence margin, by which time its
	// instance manager has killed postgres; for a released lease (a clean
	// shutdown), when the release was found.
	// +optional
	FencedTime *metav1.Time `json:"fencedTime,omitempty"`
	// detectedTime is when daytwo found the lease expired.
	// +optional
	DetectedTime *metav1.Time `json:"detectedTime,omitempty"`
	// promotedTime is when the new primary finished its promotion, and so
	// accepted writes.
	// +optional
	PromotedTime *metav1.Time `json:"promotedTime,omitempty"`
	// lagBytes is how much WAL the old primary had, at its last lease
	// renewal, beyond what the promoted replica had received: the most
	// that can be lost (0 when it held everything).
	// +optional
	LagBytes int64 `json:"lagBytes,omitempty"`
}

// SwitchoverResult is how a requested switchover ended.
// +kubebuilder:validation:Enum=Succeeded;Refused;Failed
type SwitchoverResult string

// Switchover results.
const (
	SwitchoverSucceeded SwitchoverResult = "Succeeded"
	SwitchoverRefused   SwitchoverResult = "Refused"
	SwitchoverFailed    SwitchoverResult = "Failed"
)

// SwitchoverRecord is the outcome of the newest switchover request.
type SwitchoverRecord struct {
	// requestedTime is the daytwo.dev/switchover-requested time it answers.
	// +required
	RequestedTime metav1.Time `json:"requestedTime"`
	// from is the primary that stepped down.
	// +optional
	From string `json:"from,omitempty"`
	// to is the instance promoted (or asked for).
	// +optional
	To string `json:"to,omitempty"`
	// result is how it ended.
	// +required
	Result SwitchoverResult `json:"result"`
	// message says why it was refused or failed, or what it did.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
	// startedTime is when the old primary was asked to step down.
	// +optional
	StartedTime *metav1.Time `json:"startedTime,omitempty"`
	// promotedTime is when the new primary finished its promotion.
	// +optional
	PromotedTime *metav1.Time `json:"promotedTime,omitempty"`
	// lsn is the old primary's shutdown checkpoint, which the new primary
	// had received before it was promoted.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	LSN string `json:"lsn,omitempty"`
}

// WALArchiveStatus is what the primary last archived.
type WALArchiveStatus struct {
	// backup is the DatabaseBackup the WAL is archived to.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Backup string `json:"backup"`

	// lastArchivedWAL is the newest WAL file the primary archived.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`

	// lastArchivedTime is when it was archived.
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
}

// RecoveryProgress is how far a point-in-time recovery has replayed.
type RecoveryProgress struct {
	// baseBackup is the base backup the recovery started from.
	// +required
	BaseBackup string `json:"baseBackup"`
	// targetTime is the target time, when the recovery has one; with
	// neither target, recovery replays to the end of the archive.
	// +optional
	TargetTime *metav1.Time `json:"targetTime,omitempty"`
	// targetLSN is the target LSN, when the recovery has one.
	// +optional
	TargetLSN string `json:"targetLSN,omitempty"`
	// replayedLSN is how far replay has come (the start of the WAL segment it replays).
	// +optional
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// endLSN is where replay ends at most: the target LSN, or the end of
	// the archive when recovery began.
	// +optional
	EndLSN string `json:"endLSN,omitempty"`
	// bytesPerSecond is the replay rate so far.
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// remainingSeconds estimates the time left at that rate.
	// +optional
	RemainingSeconds int64 `json:"remainingSeconds,omitempty"`
	// restored counts the WAL files fetched from the archive.
	// +optional
	Restored int32 `json:"restored,omitempty"`
}

// DatabaseStatus is what daytwo observed about a Database.
type DatabaseStatus struct {
	// conditions are Ready, Progressing, PendingRestart, UpgradeFailed and
	// the others the operator reports.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is a one-word summary; conditions carry the detail.
	// +optional
	Phase DatabasePhase `json:"phase,omitempty"`

	// ready is true when the primary accepts connections.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// endpoint is the host:port of the read-write Service.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// currentVersion is the PostgreSQL version the instances run.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// currentImage is the image the instances run.
	// +optional
	CurrentImage string `json:"currentImage,omitempty"`

	// upgrade is the last major upgrade, running or finished.
	// +optional
	Upgrade *MajorUpgradeStatus `json:"upgrade,omitempty"`

	// failedImage is the last image that was rolled back.
	// +optional
	FailedImage string `json:"failedImage,omitempty"`

	// instances is the number of PostgreSQL pods asked for.
	// +optional
	Instances int32 `json:"instances,omitempty"`

	// readyInstances is the number of PostgreSQL pods that are ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`

	// selector is the label selector of the instance pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// roles is where each of spec.roles stands on the primary.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Roles []RoleStatus `json:"roles,omitempty"`

	// databases is where each of spec.databases stands on the primary.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Databases []LogicalDatabaseStatus `json:"databases,omitempty"`

	// pooler is where spec.pooler's pools stand.
	// +optional
	Pooler *PoolerStatus `json:"pooler,omitempty"`

	// replica is where a replica Database (spec.replica) stands against
	// its source: the lag, and the point a promotion would keep.
	// +optional
	Replica *ReplicaStatus `json:"replica,omitempty"`

	// primary is the name of the pod that runs the primary: the holder of
	// the primary Lease (<name>-primary).
	// +optional
	Primary string `json:"primary,omitempty"`

	// targetPrimary is set while the primary moves, by a failover or a
	// switchover: the instance being promoted. It is empty once that
	// instance serves writes.
	// +optional
	TargetPrimary string `json:"targetPrimary,omitempty"`

	// lastFailover records the last promotion of a replica after the
	// primary was lost.
	// +optional
	LastFailover *FailoverRecord `json:"lastFailover,omitempty"`

	// lastSwitchover is the outcome of the newest switchover request.
	// +optional
	LastSwitchover *SwitchoverRecord `json:"lastSwitchover,omitempty"`

	// recovery is the progress of a point-in-time recovery while the
	// Database bootstraps from a Physical backup.
	// +optional
	Recovery *RecoveryProgress `json:"recovery,omitempty"`

	// walArchive is what the primary last archived, while a Physical
	// DatabaseBackup archives the WAL.
	// +optional
	WALArchive *WALArchiveStatus `json:"walArchive,omitempty"`

	// secretName is the name of the credentials Secret.
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// database is the application database: the credentials Secret's
	// dbname, where `kubectl daytwo psql` connects.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database,omitempty"`

	// instanceStatuses is what each instance manager reported (GET /status).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=9
	InstanceStatuses []InstanceStatus `json:"instanceStatuses,omitempty"`

	// parameters are the effective tuned and user settings.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Parameters []EffectiveParameter `json:"parameters,omitempty"`
}

// Database is a PostgreSQL cluster run by daytwo's instance manager.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.instances,statuspath=.status.instances,selectorpath=.status.selector
// +kubebuilder:resource:shortName=db,categories=daytwo
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.instances`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.primary`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec DatabaseSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &Database{}, &DatabaseList{})
}

// Keys of a Database's credentials Secret (status.secretName). WebApps with a
// databaseRef get them as DATABASE_URL and the PG* variables.
const (
	CredentialsHost     = "host"
	CredentialsPort     = "port"
	CredentialsDatabase = "dbname"
	CredentialsUser     = "username"
	CredentialsPassword = "password"
	CredentialsURI      = "uri"
	// CredentialsCA is the CA certificate (PEM) the Database's server
	// certificate chains to: clients verify the server with it
	// (sslmode=verify-full, as the uri says).
	CredentialsCA = "ca.crt"
)

// CredentialsSecretName is the name of the Secret holding the Database's
// application credentials; it is fixed so referrers can watch it by name.
func (d *Database) CredentialsSecretName() string {
	return d.Name + "-credentials"
}

// AppDatabase is the application database and its owner: the credentials
// Secret's, made by the bootstrap (spec.bootstrap.initdb, "app" by
// default).
func (d *Database) AppDatabase() (name, owner string) {
	name, owner = "app", "app"
	if b := d.Spec.Bootstrap; b != nil && b.InitDB != nil {
		name, owner = cmp.Or(b.InitDB.Database, name), cmp.Or(b.InitDB.Owner, owner)
	}
	return name, owner
}

// ReplicationSecretName is the Secret holding the replication role's
// password (key "password"), which streams WAL and takes base backups.
func (d *Database) ReplicationSecretName() string { return d.Name + "-replication" }

// PrimaryServiceName is the Service that reaches the primary.
func (d *Database) PrimaryServiceName() string { return d.Name + "-rw" }

// ReplicaServiceName is the Service that reaches the streaming replicas.
func (d *Database) ReplicaServiceName() string { return d.Name + "-ro" }

// PrimaryHost is the primary's DNS name in the cluster, as clients verify
// it against the server certificate.
func (d *Database) PrimaryHost() string { return d.PrimaryServiceName() + "." + d.Namespace + ".svc" }

// ReplicaHost is the replicas' DNS name in the cluster.
func (d *Database) ReplicaHost() string { return d.ReplicaServiceName() + "." + d.Namespace + ".svc" }

// InstanceHost is the DNS name of the Database's instance pod, behind the
// headless Service of the Database's name.
func (d *Database) InstanceHost(pod string) string {
	return pod + "." + d.Name + "." + d.Namespace + ".svc"
}

// MajorUpgradePhase is where a major upgrade stands.
// +kubebuilder:validation:Enum=BackingUp;Stopping;Upgrading;Starting;Succeeded;Failed
type MajorUpgradePhase string

// Major upgrade phases.
const (
	MajorUpgradeBackingUp MajorUpgradePhase = "BackingUp"
	MajorUpgradeStopping  MajorUpgradePhase = "Stopping"
	MajorUpgradeUpgrading MajorUpgradePhase = "Upgrading"
	MajorUpgradeStarting  MajorUpgradePhase = "Starting"
	MajorUpgradeSucceeded MajorUpgradePhase = "Succeeded"
	MajorUpgradeFailed    MajorUpgradePhase = "Failed"
)

// MajorUpgradeStatus is one major upgrade: the instances stop, a Job
// upgrades the primary's data with pg_upgrade, and the instances start on
// the new version (the replicas clone the primary again).
type MajorUpgradeStatus struct {
	// from is the major version upgraded from.
	// +required
	From string `json:"from"`
	// to is the major version upgraded to.
	// +required
	To string `json:"to"`
	// phase is where the upgrade stands.
	// +required
	Phase MajorUpgradePhase `json:"phase"`
	// startTime is when the instances were asked to stop: writes are
	// unavailable from then on.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the primary accepted connections again, on
	// the new version (Succeeded) or the old one (Failed).
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// writesUnavailableSeconds is completionTime - startTime.
	// +optional
	WritesUnavailableSeconds int64 `json:"writesUnavailableSeconds,omitempty"`
	// message says what happens, or why the upgrade failed.
	// +optional
	Message string `json:"message,omitempty"`
	// backupID is the pre-upgrade backup (DatabaseBackup <name>-pre-upgrade),
	// taken before the instances stop when backup storage is configured.
	// +optional
	BackupID string `json:"backupID,omitempty"`
}
