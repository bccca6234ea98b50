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
	"github.com/spf13/pflag"
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
	var fl instanceapi.RunFlags
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
			cfg, err := configFrom(cmd.Flags(), &fl)
			if err != nil {
				return err
			}
			var lease *instance.KubeLease
			if fl.Lease != "" {
				if lease, err = instance.NewKubeLease(cfg.Namespace, fl.Lease); err != nil {
					return err
				}
				lease.Term = cfg.LeaseDuration
			}
			// SIGTERM (pod deletion) and SIGINT stop postgres fast; SIGHUP re-reads the configuration.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			log := zap.New(zap.UseDevMode(false)).WithName("instance")
			var restore instance.RestoreFunc
			restoreFrom := storageFlags{StorageFlags: fl.Restore}
			if restoreFrom.set() {
				st, prefix, err := restoreFrom.open()
				if err != nil {
					return err
				}
				restore = func(ctx context.Context, conn backup.Conn, role string) error {
					got, err := backup.Restore(ctx, backup.Options{Conn: conn, Storage: st, Prefix: prefix, Series: restoreFrom.series, BinDir: cfg.BinDir}, fl.RestoreID, role)
					if err == nil {
						log.Info("Restored backup", "id", got.ID, "bytes", got.Bytes, "sha256", got.SHA256)
					}
					return err
				}
			}
			m := instance.New(cfg, log, restore)
			if fl.RestorePhysical {
				r, err := recoveryFromFlags(restoreFrom, fl.RestoreID, fl.RecoveryTarget)
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
			switch {
			case fl.UpgradeOnly:
				err = m.UpgradeOnly(ctx)
			case fl.BootstrapOnly:
				err = m.BootstrapOnly(ctx)
			default:
				err = m.Run(ctx)
			}
			if err != nil && fl.TerminationLog != "" {
				// The operator shows it (a failed restore, say) from the pod's status.
				_ = os.WriteFile(fl.TerminationLog, []byte(err.Error()), 0o600)
			}
			return err
		},
	}
	fl.Bind(cmd.Flags())
	return cmd
}

// configFrom is the instance manager's configuration the parsed flags
// describe; f says which were set.
func configFrom(f *pflag.FlagSet, fl *instanceapi.RunFlags) (*instance.Config, error) {
	cfg := &instance.Config{
		PGData: fl.PGData, ParametersFile: fl.ParametersFile, SecretsDir: fl.SecretsDir, RunDir: fl.RunDir,
		HTTPAddress: fl.HTTPAddress, MetricsAddress: fl.MetricsAddress, Port: fl.Port,
		Cluster: fl.Cluster, Namespace: fl.Namespace, TLS: fl.TLS, Pod: fl.Pod, Role: fl.Role,
		PrimaryHost: fl.PrimaryHost, PrimaryPort: fl.PrimaryPort, Database: fl.Database, Owner: fl.Owner,
		FromBackup: fl.FromBackup, ShutdownTimeout: fl.ShutdownTimeout, LeaseDuration: fl.LeaseDuration, BinDir: fl.BinDir, DatabaseUID: fl.DatabaseUID,
		BootstrapSource: fl.BootstrapSource, ReuseData: fl.ReuseData, UpgradeFrom: fl.UpgradeFrom, UpgradeDeadline: fl.UpgradeDeadline,
	}
	if d := fl.LeaseDuration; d < instanceapi.MinLeaseDuration || d > instanceapi.MaxLeaseDuration || d%time.Second != 0 {
		return nil, fmt.Errorf("--%s: %s is not whole seconds from %s to %s (the Lease records whole seconds)",
			instanceapi.FlagLeaseDuration, d, instanceapi.MinLeaseDuration, instanceapi.MaxLeaseDuration)
	}
	var err error
	if f.Changed(instanceapi.FlagPeers) {
		if cfg.Peers, err = instance.ParsePeers(instanceapi.FlagPeers, fl.Peers); err != nil {
			return nil, err
		}
	}
	if f.Changed(instanceapi.FlagPeerAPIs) {
		if cfg.PeerAPIs, err = instance.ParsePeers(instanceapi.FlagPeerAPIs, fl.PeerAPIs); err != nil {
			return nil, err
		}
	}
	if fl.Lease != "" {
		// The lease decides; until it is read the instance is no primary.
		cfg.Role = instanceapi.RoleReplica
	}
	if fl.ImportHost != "" {
		imp := &instance.ImportSource{Host: fl.ImportHost, Port: fl.ImportPort, User: fl.ImportUser,
			Databases: fl.ImportDatabases, Roles: fl.ImportRoles, Password: os.Getenv(instanceapi.EnvImportPassword)}
		// Read once: postgres and everything else this process starts
		// must not inherit it.
		_ = os.Unsetenv(instanceapi.EnvImportPassword)
		if u := os.Getenv(instanceapi.EnvImportUser); u != "" && !f.Changed(instanceapi.FlagImportUser) {
			imp.User = u
		}
		cfg.Import = imp
	}
	return cfg, cfg.Validate()
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
func recoveryFromFlags(from storageFlags, id string, target instanceapi.RecoveryTarget) (*instance.Recovery, error) {
	targetTime, targetLSN := target.Time, target.LSN
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
