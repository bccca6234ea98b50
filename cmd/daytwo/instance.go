package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instance"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

func newInstanceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "instance",
		Short: "The in-pod PostgreSQL instance manager",
	}
	cmd.AddCommand(newInstanceRunCommand(), newInstanceBootstrapCommand(), newInstanceBundleCommand(), newInstanceWALArchiveCommand(), newInstanceWALRestoreCommand())
	return cmd
}

func newInstanceRunCommand() *cobra.Command {
	cfg := &instance.Config{}
	var role, restoreID, termLog, leaseName, targetTime, targetLSN string
	var physical, upgradeOnly, bootstrapOnly, importRoles bool
	var imp instance.ImportSource
	var importDatabases []string
	var peers, peerAPIs string
	var restoreFrom storageFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Initialise or clone the data directory, then run and supervise postgres",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if instance.NeedsInit() {
				// The container's first process: be its init, and run the
				// manager as a child.
				code, err := instance.RunInit()
				if err != nil {
					return err
				}
				os.Exit(code)
			}
			cfg.Role = instanceapi.Role(role)
			if cmd.Flags().Changed(instanceapi.FlagPeers) {
				var err error
				if cfg.Peers, err = instance.ParsePeers(instanceapi.FlagPeers, peers); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed(instanceapi.FlagPeerAPIs) {
				var err error
				if cfg.PeerAPIs, err = instance.ParsePeers(instanceapi.FlagPeerAPIs, peerAPIs); err != nil {
					return err
				}
			}
			var lease *instance.KubeLease
			if leaseName != "" {
				// The lease decides; until it is read the instance is no primary.
				cfg.Role = instanceapi.RoleReplica
				var err error
				if lease, err = instance.NewKubeLease(cfg.Namespace, leaseName); err != nil {
					return err
				}
			}
			if imp.Host != "" {
				imp.Databases, imp.Roles, imp.Password = importDatabases, importRoles, os.Getenv(instanceapi.EnvImportPassword)
				// Read once: postgres and everything else this process
				// starts must not inherit it.
				_ = os.Unsetenv(instanceapi.EnvImportPassword)
				if u := os.Getenv(instanceapi.EnvImportUser); u != "" && !cmd.Flags().Changed(instanceapi.FlagImportUser) {
					imp.User = u
				}
				cfg.Import = &imp
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			// SIGTERM (pod deletion) and SIGINT stop postgres fast; SIGHUP re-reads the configuration.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			log := zap.New(zap.UseDevMode(false)).WithName("instance")
			var restore instance.RestoreFunc
			if restoreFrom.set() {
				st, prefix, err := restoreFrom.open()
				if err != nil {
					return err
				}
				restore = func(ctx context.Context, conn backup.Conn, role string) error {
					got, err := backup.Restore(ctx, backup.Options{Conn: conn, Storage: st, Prefix: prefix, Series: restoreFrom.series, BinDir: cfg.BinDir}, restoreID, role)
					if err == nil {
						log.Info("Restored backup", "id", got.ID, "bytes", got.Bytes, "sha256", got.SHA256)
					}
					return err
				}
			}
			m := instance.New(cfg, log, restore)
			if physical {
				r, err := recoveryFromFlags(restoreFrom, restoreID, targetTime, targetLSN)
				if err != nil {
					return err
				}
				m.UseRecovery(r)
			}
			if lease != nil {
				m.UseLease(lease)
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			go func() {
				for range hup {
					m.Reload()
				}
			}()
			var err error
			switch {
			case upgradeOnly:
				err = m.UpgradeOnly(ctx)
			case bootstrapOnly:
				err = m.BootstrapOnly(ctx)
			default:
				err = m.Run(ctx)
			}
			if err != nil && termLog != "" {
				// The operator shows it (a failed restore, say) from the pod's status.
				_ = os.WriteFile(termLog, []byte(err.Error()), 0o600)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.PGData, instanceapi.FlagPGData, os.Getenv("PGDATA"), "Data directory.")
	f.StringVar(&cfg.ParametersFile, "parameters-file", filepath.Join(instanceapi.ConfigDir, instanceapi.ParametersFile), "The operator's rendered settings.")
	f.StringVar(&cfg.SecretsDir, "secrets-dir", instanceapi.SecretsDir, "Directory with app-password and replication-password.")
	f.StringVar(&cfg.RunDir, instanceapi.FlagRunDir, instanceapi.RunDir, "Directory for the socket and the password file.")
	f.StringVar(&cfg.HTTPAddress, "http-address", fmt.Sprintf(":%d", instanceapi.Port), "Address of the instance API.")
	f.StringVar(&cfg.MetricsAddress, "metrics-address", fmt.Sprintf(":%d", instanceapi.MetricsPort), "Address of /metrics (plain HTTP); empty serves none.")
	f.IntVar(&cfg.Port, "port", instanceapi.PostgresPort, "PostgreSQL port.")
	f.StringVar(&cfg.Cluster, instanceapi.FlagCluster, "", "Name of the Database.")
	f.StringVar(&cfg.Pod, instanceapi.FlagPod, os.Getenv("POD_NAME"), "Name of this pod.")
	f.StringVar(&role, "role", "", "primary or replica, for an instance without --lease.")
	f.StringVar(&leaseName, instanceapi.FlagLease, "", "The Database's primary Lease: its holder runs as the primary, the others as replicas.")
	f.StringVar(&cfg.Namespace, instanceapi.FlagNamespace, os.Getenv("POD_NAMESPACE"), "Namespace of the Database and its Lease.")
	f.BoolVar(&cfg.TLS, instanceapi.FlagTLS, false, "Serve TLS with the certificate in --secrets-dir (tls.crt, tls.key), require it of network connections, "+
		"and verify other instances against ca.crt.")
	f.StringVar(&cfg.PrimaryHost, instanceapi.FlagPrimaryHost, "", "Host a replica clones and streams from.")
	f.IntVar(&cfg.PrimaryPort, "primary-port", 0, "Port of the primary; defaults to --port.")
	f.StringVar(&peers, instanceapi.FlagPeers, "", "Other instances' addresses, pod=host:port, for a replica to stream from the lease holder; "+
		"a holder not listed is reached at --primary-host. Unset: each pod's name under the Database's headless Service.")
	f.StringVar(&peerAPIs, instanceapi.FlagPeerAPIs, "", "Other instances' API addresses, pod=host:port, where the lease holder asks "+
		"for promises; a pod not listed is not asked. Unset: each pod's name under the Database's headless Service.")
	f.StringVar(&cfg.Database, instanceapi.FlagDatabase, "app", "Application database.")
	f.StringVar(&cfg.Owner, instanceapi.FlagOwner, "app", "Owner role of the application database.")
	f.BoolVar(&cfg.FromBackup, instanceapi.FlagFromBackup, false, "Bootstrap the primary from a backup instead of initdb.")
	f.DurationVar(&cfg.ShutdownTimeout, instanceapi.FlagShutdownTimeout, 50*time.Second, "How long a fast shutdown may take before an immediate one.")
	f.StringVar(&cfg.BinDir, "bin-dir", "", "Directory of the PostgreSQL programs; empty means $PATH.")
	f.StringVar(&cfg.DatabaseUID, instanceapi.FlagDatabaseUID, "", "metadata.uid of the Database, recorded in the data directory; empty skips the identity check.")
	f.StringVar(&cfg.BootstrapSource, instanceapi.FlagBootstrapSource, instanceapi.BootstrapInitDB, "How the Database bootstraps: initdb or fromBackup/<DatabaseBackup>.")
	f.BoolVar(&cfg.ReuseData, instanceapi.FlagReuseData, false, "Run on data another Database made, whatever its bootstrap.")
	f.StringVar(&cfg.UpgradeFrom, instanceapi.FlagUpgradeFrom, "", "Directory of the old major's bundled programs: a primary whose data is of that major upgrades it with pg_upgrade before it starts.")
	f.StringVar(&imp.Host, instanceapi.FlagImportHost, "", "Bootstrap the primary by importing from the PostgreSQL at this host (bootstrap.import).")
	f.IntVar(&imp.Port, instanceapi.FlagImportPort, 5432, "Port of the import source.")
	f.StringVar(&imp.User, instanceapi.FlagImportUser, "postgres", "User of the import source (or $"+instanceapi.EnvImportUser+"); its password is $"+instanceapi.EnvImportPassword+".")
	f.StringSliceVar(&importDatabases, instanceapi.FlagImportDatabases, nil, "Databases to import.")
	f.BoolVar(&importRoles, instanceapi.FlagImportRoles, false, "Import the roles first.")
	f.BoolVar(&bootstrapOnly, instanceapi.FlagBootstrapOnly, false, "Restore the primary's data from a backup (--"+instanceapi.FlagFromBackup+
		") when it has none, and exit without serving: the operator's restore init container.")
	f.BoolVar(&upgradeOnly, instanceapi.FlagUpgradeOnly, false, "Upgrade the data directory (see --"+instanceapi.FlagUpgradeFrom+") and exit without serving: the operator's upgrade Job.")
	f.DurationVar(&cfg.UpgradeDeadline, "upgrade-deadline", 5*time.Minute, "How long the upgraded server's first start may take before the upgrade is undone.")
	f.StringVar(&termLog, instanceapi.FlagTerminationLog, "", "Where a fatal error is written for the kubelet (/dev/termination-log in a pod).")
	restoreFrom.bind(f, "restore-")
	f.StringVar(&restoreID, instanceapi.FlagRestoreID, "", "Backup to restore with --from-backup; empty means the newest (before the recovery target).")
	f.BoolVar(&physical, instanceapi.FlagRestorePhysical, false, "Restore a base backup and replay the WAL archive (point-in-time recovery) instead of a logical backup.")
	f.StringVar(&targetTime, instanceapi.FlagRecoveryTargetTime, "", "With --restore-physical: replay up to this time (RFC 3339); empty means the end of the archive.")
	f.StringVar(&targetLSN, instanceapi.FlagRecoveryTargetLSN, "", "With --restore-physical: replay up to this LSN.")
	return cmd
}

func newInstanceBootstrapCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "bootstrap DESTINATION",
		Short: "Copy this binary to DESTINATION (the init container of a PostgreSQL pod)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return copySelf(args[0])
		},
	}
}

// newInstanceBundleCommand runs in the old image's init container of a
// major upgrade: it copies that image's PostgreSQL programs, with every
// library they load, into a volume the new image's instance manager
// upgrades with.
func newInstanceBundleCommand() *cobra.Command {
	var major, root string
	cmd := &cobra.Command{
		Use:   "bundle DESTINATION",
		Short: "Copy this image's PostgreSQL programs and their libraries to DESTINATION, runnable from another image",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			bin, err := upgrade.Bundle(root, major, args[0])
			if err != nil {
				return err
			}
			fmt.Println(bin)
			return nil
		},
	}
	cmd.Flags().StringVar(&major, "major", "", "The PostgreSQL major version to bundle.")
	cmd.Flags().StringVar(&root, "root", "/", "The file system to bundle from.")
	_ = cmd.MarkFlagRequired("major")
	return cmd
}

// newInstanceWALArchiveCommand is PostgreSQL's archive_command: it asks
// the instance manager to archive one file and waits. It holds no
// credentials, and its error goes to PostgreSQL's log.
func newInstanceWALArchiveCommand() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "wal-archive FILE",
		Short: "Archive one WAL file through the instance manager (PostgreSQL's archive_command)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), instance.ArchiveWait)
			defer cancel()
			return instance.AskToArchive(ctx, socket, args[0])
		},
	}
	cmd.Flags().StringVar(&socket, "socket", instance.ArchiveSocket(instanceapi.RunDir), "The instance manager's archive socket.")
	return cmd
}

// recoveryFromFlags is the physical restore the flags describe.
func recoveryFromFlags(from storageFlags, id, targetTime, targetLSN string) (*instance.Recovery, error) {
	st, prefix, err := from.open()
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", instanceapi.FlagRestorePhysical, err)
	}
	r := &instance.Recovery{Storage: st, Prefix: prefix, Keys: from.series.Keys(), KeyMissing: from.series.KeyMissing, BackupID: id, TargetLSN: targetLSN}
	if targetTime != "" {
		if r.TargetTime, err = time.Parse(time.RFC3339Nano, targetTime); err != nil {
			return nil, fmt.Errorf("--%s: %q is not an RFC 3339 time such as 2026-11-24T07:00:00Z", instanceapi.FlagRecoveryTargetTime, targetTime)
		}
	}
	return r, r.Validate()
}

// newInstanceWALRestoreCommand is PostgreSQL's restore_command during a
// point-in-time recovery: it asks the instance manager for one file. Exit
// status 1 tells PostgreSQL the archive does not hold the file (the end of
// the archive); 126 stops recovery (PostgreSQL treats it like a shell
// error), so a storage failure never passes for the archive's end. A
// replica's (--standby) exits 1 on every failure: the archive is only its
// fallback, and 126 would stop the standby.
func newInstanceWALRestoreCommand() *cobra.Command {
	var socket string
	var standby bool
	cmd := &cobra.Command{
		Use:   "wal-restore FILE PATH",
		Short: "Restore one archived WAL file through the instance manager (PostgreSQL's restore_command)",
		Args:  cobra.ExactArgs(2),
		Run: func(_ *cobra.Command, args []string) {
			ctx, cancel := context.WithTimeout(context.Background(), instance.ArchiveWait)
			defer cancel()
			dest, err := filepath.Abs(args[1])
			if err == nil {
				err = instance.AskToRestore(ctx, socket, args[0], dest)
			}
			switch {
			case errors.Is(err, wal.ErrNotArchived):
				os.Exit(1)
			case err != nil && standby:
				fmt.Fprintln(os.Stderr, "daytwo wal-restore:", err)
				os.Exit(1)
			case err != nil:
				fmt.Fprintln(os.Stderr, "daytwo wal-restore:", err)
				os.Exit(126)
			}
		},
	}
	cmd.Flags().StringVar(&socket, "socket", instance.ArchiveSocket(instanceapi.RunDir), "The instance manager's socket.")
	cmd.Flags().BoolVar(&standby, "standby", false, "A replica's restore_command: every failure exits 1 (not archived), so the standby goes on streaming.")
	return cmd
}

func copySelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("failed to find this binary: %w", err)
	}
	in, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", self, err)
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".daytwo-*")
	if err != nil {
		return fmt.Errorf("failed to create a file next to %s: %w", dst, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		return fmt.Errorf("failed to copy the binary: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
