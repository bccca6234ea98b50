package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/version"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// storageFlags select a backup storage (instanceapi.StorageFlags, the
// flags the operator renders); credentials come from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never from flags.
type storageFlags struct {
	instanceapi.StorageFlags
	// series is the series the flags name, with its keys from the
	// environment once open has run.
	series backup.Series
	// keys are the S3 credentials, taken from the environment once.
	keys *[2]string
}

func (s *storageFlags) bind(f *pflag.FlagSet, prefix string) { s.StorageFlags.Bind(f, prefix) }

func (s *storageFlags) set() bool { return s.Bucket != "" || s.Path != "" }

func (s *storageFlags) open() (backup.Storage, string, error) {
	prefix := backup.NormalizePrefix(s.Prefix)
	s.series.UID, s.series.Name, s.series.Database = s.SeriesUID, s.SeriesName, s.Database
	if s.series.Key == nil {
		// Like the S3 keys: read once, and not passed on. Set but empty
		// turns authentication off; unset, when required, trusts nothing.
		v, set := os.LookupEnv(backup.SeriesKeyEnv)
		s.series.Key, s.series.KeyMissing = []byte(strings.TrimSpace(v)), s.KeyRequired && !set
		s.series.EncryptionKey = []byte(strings.TrimSpace(os.Getenv(backup.EncryptionKeyEnv)))
		_ = os.Unsetenv(backup.SeriesKeyEnv)
		_ = os.Unsetenv(backup.EncryptionKeyEnv)
	}
	if err := backup.CheckKeys(s.series.Keys()); err != nil {
		return nil, "", err
	}
	switch {
	case s.Path != "" && s.Bucket != "":
		return nil, "", errors.New("set either a path or an S3 bucket, not both")
	case s.Path != "":
		return backup.NewDir(s.Path), prefix, nil
	case s.Bucket != "" && s.Endpoint != "":
		if s.keys == nil {
			// Read once (a restore opens its storage twice): postgres,
			// pg_dump, pg_restore and everything else this process starts
			// must not inherit the keys.
			s.keys = &[2]string{os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")}
			_ = os.Unsetenv("AWS_ACCESS_KEY_ID")
			_ = os.Unsetenv("AWS_SECRET_ACCESS_KEY")
		}
		ca := s.CAFile
		if _, err := os.Stat(ca); ca != "" && os.IsNotExist(err) {
			// A restore's CA Secret may be gone once the data is there
			// (its volume is optional); a restore that needs it fails on
			// the certificate, saying so.
			ca = ""
		}
		st, err := backup.NewS3(backup.S3Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Region: s.Region, Insecure: s.Insecure,
			AccessKeyID: s.keys[0], SecretAccessKey: s.keys[1], CAFile: ca, S3Access: s.S3Access})
		return st, prefix, err
	default:
		return nil, "", errors.New("no storage: set a path, or an S3 endpoint and bucket")
	}
}

// connFromEnv reads the libpq variables the Job sets from the credentials Secret.
func connFromEnv() backup.Conn {
	port, err := strconv.Atoi(os.Getenv("PGPORT"))
	if err != nil {
		port = 5432
	}
	return backup.Conn{Host: os.Getenv("PGHOST"), Port: port, User: os.Getenv("PGUSER"),
		Password: os.Getenv("PGPASSWORD"), Database: os.Getenv("PGDATABASE")}
}

func newBackupCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "backup", Short: "Backups: what backup Jobs run"}
	cmd.AddCommand(newBackupRunCommand(), newBackupRestoreCommand(), newBackupCheckCommand(), newBackupListCommand())
	return cmd
}

func newBackupRunCommand() *cobra.Command {
	var fl backup.RunFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Stream pg_dump (or, with --physical, a base backup) into storage, write the manifest, prune by retention",
		Long: "Connects with the libpq environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE; with --physical\n" +
			"a replication user); S3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. With\n" +
			"--roles-user, the roles' passwords are read as that user, its password from " + backup.RolesPasswordEnv + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			sf := &storageFlags{StorageFlags: fl.Storage}
			var res backup.Result
			var err error
			if fl.Physical {
				res, err = runBaseBackup(ctx, sf, fl.ID, fl.SwitchWALHost, fl.Retention)
			} else {
				o := backup.Options{LockWaitTimeout: fl.LockWaitTimeout, Compression: fl.Compression}
				if fl.RolesUser != "" {
					roles := connFromEnv()
					roles.User, roles.Password = fl.RolesUser, os.Getenv(backup.RolesPasswordEnv)
					_ = os.Unsetenv(backup.RolesPasswordEnv) // pg_dump and pg_dumpall need not see it
					o.Roles = &roles
				}
				res, err = runBackup(ctx, sf, fl.ID, o, fl.Retention)
			}
			if err != nil {
				res.Error = err.Error()
			}
			report(cmd, fl.TerminationLog, res)
			return err
		},
	}
	fl.Bind(cmd.Flags())
	return cmd
}

// runBaseBackup streams a base backup into storage, records it in the
// series, and prunes base backups and the WAL only pruned ones needed.
func runBaseBackup(ctx context.Context, sf *storageFlags, id, switchHost string, keep backup.Retention) (backup.Result, error) {
	st, prefix, id, err := prepareRun(ctx, sf, id)
	if err != nil {
		return backup.Result{ID: id}, err
	}
	c := connFromEnv()
	src := wal.Source{Host: c.Host, Port: c.Port, User: c.User, Password: c.Password}
	if switchHost != "" {
		primary := backup.Conn{Host: switchHost, Port: c.Port, User: c.User, Password: c.Password, Database: "postgres"}
		src.SwitchWAL = func(ctx context.Context) error {
			_, err := backup.Check(ctx, primary, "SELECT pg_switch_wal()")
			return err
		}
	}
	b, err := wal.TakeBase(ctx, src, st, prefix, id, sf.series.Keys())
	res := backup.Result{ID: id, Bytes: b.Size, SHA256: b.SHA256, End: b.Finished, DurationSeconds: backup.Elapsed(b.Started, b.Finished)}
	if err != nil {
		return res, err
	}
	m := backup.Manifest{ID: id, Database: sf.series.Database, Series: sf.series.UID, SeriesName: sf.series.Name,
		Method: backup.MethodPhysical, Format: "pg_basebackup-tar-zstd", DataKey: wal.BaseDataKey(prefix, id),
		Start: b.Started, End: b.Finished, Bytes: b.Size, SHA256: b.SHA256, DaytwoVersion: version.Version}
	if err := backup.Record(ctx, st, prefix, sf.series, m); err != nil {
		return res, fmt.Errorf("failed to record base backup %s: %w", id, err)
	}
	before, err := backup.List(ctx, st, prefix, sf.series)
	if err != nil {
		return res, fmt.Errorf("base backup %s is stored, but listing the series failed: %w", id, err)
	}
	kept, pruned, err := backup.Prune(ctx, st, prefix, sf.series, keep)
	res.Pruned, res.Retained = pruned, backup.Summaries(kept, 10)
	if err != nil {
		return res, fmt.Errorf("base backup %s is stored, but pruning failed: %w", id, err)
	}
	// Only this series' pruned base backups go: another series at the same
	// prefix (a DatabaseBackup made again under the same name) keeps its own.
	var drop []string
	for _, m := range before {
		if m.Series == sf.series.UID && !slices.ContainsFunc(kept, func(k backup.Manifest) bool { return k.ID == m.ID }) {
			drop = append(drop, m.ID)
		}
	}
	if _, _, err := wal.PruneArchive(ctx, st, prefix, drop); err != nil {
		return res, fmt.Errorf("base backup %s is stored, but pruning the WAL archive failed: %w", id, err)
	}
	if res.Recoverability, err = wal.Recoverability(ctx, st, prefix, kept); err != nil {
		return res, fmt.Errorf("base backup %s is stored, but %w", id, err)
	}
	return res, nil
}

// prepareRun opens the storage and names the run (now, without an ID). A
// missing bucket is created, so a first backup needs no setup step.
func prepareRun(ctx context.Context, sf *storageFlags, id string) (backup.Storage, string, string, error) {
	if id == "" {
		id = backup.NewID(time.Now())
	}
	st, prefix, err := sf.open()
	if err != nil {
		return nil, "", id, err
	}
	return st, prefix, id, backup.EnsureBucket(ctx, st)
}

// runBackup takes a logical backup with o's lock wait and compression.
func runBackup(ctx context.Context, sf *storageFlags, id string, o backup.Options, keep backup.Retention) (backup.Result, error) {
	if err := o.Compression.Check(); err != nil {
		return backup.Result{ID: id}, err
	}
	st, prefix, id, err := prepareRun(ctx, sf, id)
	if err != nil {
		return backup.Result{ID: id}, err
	}
	o.Conn, o.Storage, o.Prefix, o.Series = connFromEnv(), st, prefix, sf.series
	m, err := backup.Run(ctx, o, id, version.Version)
	res := backup.Result{ID: id, Bytes: m.Bytes, SHA256: m.SHA256, PGVersion: m.PGVersion, End: m.End,
		DurationSeconds: backup.Elapsed(m.Start, m.End)}
	if err != nil {
		return res, err
	}
	kept, pruned, err := backup.Prune(ctx, st, prefix, sf.series, keep)
	res.Pruned, res.Retained, res.Recoverability = pruned, backup.Summaries(kept, 10), backup.WindowOf(kept)
	if err != nil {
		return res, fmt.Errorf("backup %s is stored, but pruning failed: %w", id, err)
	}
	return res, nil
}

// report prints the result and writes it where the kubelet reads the
// termination message. It carries no secret: IDs, sizes, hashes, errors.
func report(cmd *cobra.Command, path string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"error":%q}`, "the result did not marshal: "+err.Error()))
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	if path != "" {
		if len(b) > 4000 {
			b = b[:4000]
		}
		_ = os.WriteFile(path, b, 0o600)
	}
}

func newBackupRestoreCommand() *cobra.Command {
	var sf storageFlags
	var id, role string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Stream a stored backup into pg_restore, verifying its SHA-256",
		Long:  "The target comes from the libpq environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE).",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			st, prefix, err := sf.open()
			if err != nil {
				return err
			}
			m, err := backup.Restore(ctx, backup.Options{Conn: connFromEnv(), Storage: st, Prefix: prefix, Series: sf.series}, id, role)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored backup %s (%d bytes, sha256 %s)\n", m.ID, m.Bytes, m.SHA256)
			return nil
		},
	}
	sf.bind(cmd.Flags(), "")
	cmd.Flags().StringVar(&id, "id", "", "Backup ID; empty means the newest.")
	cmd.Flags().StringVar(&role, "role", "", "Role that owns the restored objects.")
	return cmd
}

func newBackupListCommand() *cobra.Command {
	var sf storageFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Print the series' complete backups in its storage, newest first, as one line of JSON",
		Long: "Reads the manifests of the series the storage flags name (the series key and encryption key from the " +
			"environment, as a restore reads them): those whose MAC verifies. kubectl daytwo backup list runs it in a pod.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			st, prefix, err := sf.open()
			if err != nil {
				return err
			}
			ms, err := backup.List(ctx, st, prefix, sf.series)
			if err != nil {
				return err
			}
			if ms == nil {
				ms = []backup.Manifest{}
			}
			b, err := json.Marshal(ms)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	}
	sf.bind(cmd.Flags(), "")
	return cmd
}

// CheckResult is what a verification check Job reports.
type CheckResult struct {
	Rows  int    `json:"rows"`
	Error string `json:"error,omitempty"`
}

func newBackupCheckCommand() *cobra.Command {
	var query, termLog string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Run a verification query against a restored database; it must return at least one row",
		Long:  "Connects with the libpq environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE).",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			rows, err := backup.Check(ctx, connFromEnv(), query)
			res := CheckResult{Rows: rows}
			if err != nil {
				res.Error = err.Error()
			}
			report(cmd, termLog, res)
			return err
		},
	}
	cmd.Flags().StringVar(&query, "query", backup.DefaultCheckQuery, "The check query.")
	cmd.Flags().StringVar(&termLog, "termination-log", "/dev/termination-log", "Where the result goes for the operator; empty for none.")
	return cmd
}
