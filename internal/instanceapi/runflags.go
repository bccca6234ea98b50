package instanceapi

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
)

// RunFlags are the flags of `daytwo instance run`: the operator renders
// them with Args (the postgres container, the restore init container, the
// upgrade Job) and the daytwo binary parses them with Bind, so both sides
// read one definition. A field left zero is left out of Args, and the
// binary's default applies.
type RunFlags struct {
	// Cluster is the Database's name, Pod this pod's, Namespace theirs.
	Cluster, Pod, Namespace string
	// Lease is the primary Lease: its holder runs as the primary, the
	// others as replicas. Without one, Role is the role for good.
	Lease string
	Role  Role
	// PGData is the data directory, RunDir the socket's and password
	// file's, SecretsDir the mounted Secrets', ParametersFile the
	// operator's rendered settings, BinDir PostgreSQL's programs.
	PGData, RunDir, SecretsDir, ParametersFile, BinDir string
	// HTTPAddress serves the instance API, MetricsAddress /metrics; Port is
	// PostgreSQL's.
	HTTPAddress, MetricsAddress string
	Port                        int
	// TLS serves and requires TLS (FlagTLS).
	TLS bool
	// PrimaryHost and PrimaryPort are where a replica clones and streams
	// from; Peers and PeerAPIs, pod=host:port lists, where it finds the
	// lease holder's PostgreSQL and the other instances' APIs.
	PrimaryHost     string
	PrimaryPort     int
	Peers, PeerAPIs string
	ShutdownTimeout time.Duration
	DatabaseUID     string
	BootstrapSource string
	ReuseData       bool
	Database, Owner string
	TerminationLog  string
	UpgradeFrom     string
	UpgradeOnly     bool
	UpgradeDeadline time.Duration
	BootstrapOnly   bool
	ImportHost      string
	ImportPort      int
	ImportUser      string
	ImportDatabases []string
	ImportRoles     bool
	FromBackup      bool
	RestoreID       string
	RestorePhysical bool
	RecoveryTarget  RecoveryTarget
	// LeaseDuration is the primary lease's term (FlagLeaseDuration); 0
	// renders no flag, and the binary takes LeaseDuration.
	LeaseDuration time.Duration
	Restore       StorageFlags
}

// RecoveryTarget is where a point-in-time recovery stops: a time (RFC 3339)
// or an LSN; neither replays the whole archive.
type RecoveryTarget struct {
	Time, LSN string
}

// RestorePrefix names the flags of RunFlags.Restore.
const RestorePrefix = "restore-"

// Args renders r as `daytwo instance run`'s flags.
func (r RunFlags) Args() []string { return ArgsOf(r, (*RunFlags).Bind) }

// Bind defines r's flags on f, with the binary's defaults.
func (r *RunFlags) Bind(f *pflag.FlagSet) {
	// The order is the postgres container's arguments' (Args keeps it):
	// a change of order changes the pod template, which restarts the pods.
	f.StringVar(&r.TerminationLog, FlagTerminationLog, "", "Where a fatal error is written for the kubelet (/dev/termination-log in a pod).")
	f.StringVar(&r.Cluster, FlagCluster, "", "Name of the Database.")
	f.StringVar(&r.Pod, FlagPod, os.Getenv("POD_NAME"), "Name of this pod.")
	f.StringVar(&r.PrimaryHost, FlagPrimaryHost, "", "Host a replica clones and streams from.")
	f.StringVar(&r.PGData, FlagPGData, os.Getenv("PGDATA"), "Data directory.")
	f.StringVar(&r.RunDir, FlagRunDir, RunDir, "Directory for the socket and the password file.")
	f.DurationVar(&r.ShutdownTimeout, FlagShutdownTimeout, 50*time.Second, "How long a fast shutdown may take before an immediate one.")
	f.StringVar(&r.DatabaseUID, FlagDatabaseUID, "", "metadata.uid of the Database, recorded in the data directory; empty skips the identity check.")
	f.StringVar(&r.BootstrapSource, FlagBootstrapSource, BootstrapInitDB, "How the Database bootstraps: initdb or fromBackup/<DatabaseBackup>.")
	f.StringVar(&r.Lease, FlagLease, "", "The Database's primary Lease: its holder runs as the primary, the others as replicas.")
	f.StringVar(&r.Namespace, FlagNamespace, os.Getenv("POD_NAMESPACE"), "Namespace of the Database and its Lease.")
	f.BoolVar(&r.TLS, FlagTLS, false, "Serve TLS with the certificate in --secrets-dir (tls.crt, tls.key), require it of network connections, "+
		"and verify other instances against ca.crt.")
	f.BoolVar(&r.ReuseData, FlagReuseData, false, "Run on data another Database made, whatever its bootstrap.")
	f.BoolVar(&r.FromBackup, FlagFromBackup, false, "Bootstrap the primary from a backup instead of initdb.")
	f.StringVar(&r.RestoreID, FlagRestoreID, "", "Backup to restore with --from-backup; empty means the newest (before the recovery target).")
	f.StringVar(&r.Database, FlagDatabase, "app", "Application database.")
	f.StringVar(&r.Owner, FlagOwner, "app", "Owner role of the application database.")
	f.StringVar(&r.ImportHost, FlagImportHost, "", "Bootstrap the primary by importing from the PostgreSQL at this host (bootstrap.import).")
	f.IntVar(&r.ImportPort, FlagImportPort, 5432, "Port of the import source.")
	f.StringSliceVar(&r.ImportDatabases, FlagImportDatabases, nil, "Databases to import.")
	f.BoolVar(&r.ImportRoles, FlagImportRoles, false, "Import the roles first.")
	f.StringVar((*string)(&r.Role), FlagRole, "", "primary or replica, for an instance without --lease.")
	f.StringVar(&r.SecretsDir, FlagSecretsDir, SecretsDir, "Directory with app-password and replication-password.")
	f.StringVar(&r.ParametersFile, FlagParametersFile, filepath.Join(ConfigDir, ParametersFile), "The operator's rendered settings.")
	f.StringVar(&r.BinDir, FlagBinDir, "", "Directory of the PostgreSQL programs; empty means $PATH.")
	f.StringVar(&r.HTTPAddress, FlagHTTPAddress, fmt.Sprintf(":%d", Port), "Address of the instance API.")
	f.StringVar(&r.MetricsAddress, FlagMetricsAddress, fmt.Sprintf(":%d", MetricsPort), "Address of /metrics (plain HTTP); empty serves none.")
	f.IntVar(&r.Port, FlagPort, PostgresPort, "PostgreSQL port.")
	f.IntVar(&r.PrimaryPort, FlagPrimaryPort, 0, "Port of the primary; defaults to --port.")
	f.StringVar(&r.Peers, FlagPeers, "", "Other instances' addresses, pod=host:port, for a replica to stream from the lease holder; "+
		"a holder not listed is reached at --primary-host. Unset: each pod's name under the Database's headless Service.")
	f.StringVar(&r.PeerAPIs, FlagPeerAPIs, "", "Other instances' API addresses, pod=host:port, where the lease holder asks "+
		"for promises; a pod not listed is not asked. Unset: each pod's name under the Database's headless Service.")
	f.StringVar(&r.UpgradeFrom, FlagUpgradeFrom, "", "Directory of the old major's bundled programs: a primary whose data is of that major upgrades it with pg_upgrade before it starts.")
	f.BoolVar(&r.UpgradeOnly, FlagUpgradeOnly, false, "Upgrade the data directory (see --"+FlagUpgradeFrom+") and exit without serving: the operator's upgrade Job.")
	f.DurationVar(&r.UpgradeDeadline, FlagUpgradeDeadline, 5*time.Minute, "How long the upgraded server's first start may take before the upgrade is undone.")
	f.BoolVar(&r.BootstrapOnly, FlagBootstrapOnly, false, "Restore the primary's data from a backup (--"+FlagFromBackup+
		") when it has none, and exit without serving: the operator's restore init container.")
	f.StringVar(&r.ImportUser, FlagImportUser, "postgres", "User of the import source (or $"+EnvImportUser+"); its password is $"+EnvImportPassword+".")
	f.BoolVar(&r.RestorePhysical, FlagRestorePhysical, false, "Restore a base backup and replay the WAL archive (point-in-time recovery) instead of a logical backup.")
	f.StringVar(&r.RecoveryTarget.Time, FlagRecoveryTargetTime, "", "With --restore-physical: replay up to this time (RFC 3339); empty means the end of the archive.")
	f.StringVar(&r.RecoveryTarget.LSN, FlagRecoveryTargetLSN, "", "With --restore-physical: replay up to this LSN.")
	r.Restore.Bind(f, RestorePrefix)
	f.DurationVar(&r.LeaseDuration, FlagLeaseDuration, LeaseDuration, fmt.Sprintf("The primary lease's term, recorded at each renewal (%s to %s).", MinLeaseDuration, MaxLeaseDuration))
}
