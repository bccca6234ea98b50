package instanceapi

// Prefixes of the instance manager's termination message (a fatal error)
// that the operator turns into a Database condition.
const (
	// TerminationRestoreFailed: a bootstrap from a backup failed; the pod
	// restarts to retry.
	TerminationRestoreFailed = "restore failed"
	// TerminationDataConflict: the volume holds data another Database, or
	// no daytwo bootstrap, made and the spec does not allow running on it.
	TerminationDataConflict = "data conflict"
	// TerminationUpgradeFailed: a major upgrade failed and the old data is
	// back in place; the operator returns the instances to the old image.
	TerminationUpgradeFailed = "UpgradeFailed"
	// TerminationImportFailed: bootstrap.import failed; the pod restarts
	// to try again from an empty directory.
	TerminationImportFailed = "import failed"
)

// BootstrapInitDB is the bootstrap source (flag --bootstrap-source) of a
// Database made by initdb.
const BootstrapInitDB = "initdb"

// BootstrapImport is the bootstrap source of a Database made by
// bootstrap.import.
const BootstrapImport = "import"

// BootstrapReplica is the bootstrap source of a replica Database's data:
// the source's base backup.
const BootstrapReplica = "replica"

// BootstrapFromBackup is the bootstrap source of a Database restored from
// the backups of DatabaseBackup backupRef.
func BootstrapFromBackup(backupRef string) string { return "fromBackup/" + backupRef }
