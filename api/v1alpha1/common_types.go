package v1alpha1

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// Condition types shared by every kind.
const (
	// ConditionReady is True when the object does what its spec asks.
	ConditionReady = "Ready"
	// ConditionProgressing is True while a change is being rolled out.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the object works but not fully.
	ConditionDegraded = "Degraded"
	// ConditionReconciling is True while daytwo works toward the spec, and
	// absent otherwise (kstatus); its reason is Ready's.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True while daytwo cannot go on without a change
	// from someone, and absent otherwise (kstatus); its reason is Ready's.
	ConditionStalled = "Stalled"
)

// Reasons shared by every kind.
const (
	// ReasonReconciling means the operator is still creating or updating children.
	ReasonReconciling = "Reconciling"
	// ReasonAvailable means every child is in the state the spec asks for.
	ReasonAvailable = "Available"
	// ReasonInvalidSpec means the spec cannot be acted on; the message says why.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonNotImplemented means this capability has not been built yet.
	ReasonNotImplemented = "NotImplemented"
)

// Annotations understood on every kind.
const (
	// AnnotationAdopt, set to "true", lets daytwo take over existing children
	// of the same name that it does not own yet.
	AnnotationAdopt = "daytwo.dev/adopt"
	// AnnotationReuseData, set to "true" on a Database, lets it run on a
	// retained volume that another Database made, whatever bootstrap its
	// spec asks for. Without it such data runs only when both were made by
	// initdb; otherwise the Database reports Ready=False, reason DataConflict.
	AnnotationReuseData = "daytwo.dev/reuse-data"
	// AnnotationSwitchoverRequested, an RFC 3339 time on a Database, asks
	// for one switchover: a newer time than status.lastSwitchover's asks
	// again, the same one never does (so GitOps can keep it applied).
	AnnotationSwitchoverRequested = "daytwo.dev/switchover-requested"
	// AnnotationSwitchoverTo names the instance a switchover promotes;
	// without it, the replica that received the most WAL.
	AnnotationSwitchoverTo = "daytwo.dev/switchover-to"
	// AnnotationPromoteRequested, an RFC 3339 time on a WebApp, promotes
	// its canary at once, skipping the steps left: it applies to the
	// canary that started before that time, so a value left applied
	// (GitOps) never promotes a later one.
	AnnotationPromoteRequested = "daytwo.dev/promote-requested"
	// AnnotationAbortRequested, an RFC 3339 time on a WebApp, aborts its
	// canary that started before that time, as an automatic abort does.
	AnnotationAbortRequested = "daytwo.dev/abort-requested"
	// AnnotationReconcile set to ReconcilePaused on a Database stops daytwo
	// from acting on it: the instances keep running as they are, and
	// nothing fails them over, rolls, scales or repairs them until the
	// annotation goes (a deletion is still carried out). Condition
	// ReconcilePaused says so.
	AnnotationReconcile = "daytwo.dev/reconcile"
	// ReconcilePaused is AnnotationReconcile's value that pauses.
	ReconcilePaused = "paused"
	// AnnotationApprovePrimaryUpdate on a Database lets the planned
	// restart of its primary for the StatefulSet revision it names happen
	// now, outside spec.maintenance's windows (the Progressing condition
	// names the revision that waits).
	AnnotationApprovePrimaryUpdate = "daytwo.dev/approve-primary-update"
	// AnnotationRetryUpgrade on a Database tries a failed major upgrade
	// again: any value other than the one it had when the upgrade failed.
	AnnotationRetryUpgrade = "daytwo.dev/retry-upgrade"
	// AnnotationBackupRequested on a DatabaseBackup asks for one run now,
	// besides its schedule: an RFC 3339 time, later than the last run.
	// Each new time is one more run (kubectl annotate --overwrite).
	AnnotationBackupRequested = "daytwo.dev/backup-requested"
	// AnnotationFinalBackupOfUID on a final DatabaseBackup is the UID of
	// the Database whose Snapshot deletion it serves.
	AnnotationFinalBackupOfUID = "daytwo.dev/final-backup-of-uid"
)
