package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func restoreCmd(e *env) *cobra.Command {
	var to, at, lsn string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "restore DATABASEBACKUP --to NEW-DATABASE [--time T | --lsn L]",
		Short: "Create a Database restored from a backup, at a point in time if asked",
		Long: "Writes a new Database whose spec.bootstrap.fromBackup names the DatabaseBackup (and targetTime or targetLSN), " +
			"with the version, size, storage and instances of the Database the backup was taken of, when it still exists.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if to == "" {
				return fmt.Errorf("--to names the new Database")
			}
			b := &v1alpha1.DatabaseBackup{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: args[0]}, b); err != nil {
				return fmt.Errorf("DatabaseBackup %s: %w", args[0], err)
			}
			from := &v1alpha1.BootstrapFromBackup{BackupRef: v1alpha1.LocalObjectReference{Name: b.Name}}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--time %q: want RFC 3339, such as 2026-11-25T10:00:00Z: %w", at, err)
				}
				from.TargetTime = &metav1.Time{Time: t}
			}
			if lsn != "" {
				if at != "" {
					return fmt.Errorf("--time and --lsn: give one")
				}
				from.TargetLSN = lsn
			}
			db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: to, Namespace: e.namespace}}
			if src, err := e.database(ctx, b.Spec.DatabaseRef.Name); err == nil {
				db.Spec.Version, db.Spec.Size, db.Spec.Storage, db.Spec.Resources = src.Spec.Version, src.Spec.Size, src.Spec.Storage, src.Spec.Resources
			} else if len(b.Status.Backups) > 0 {
				db.Spec.Version = b.Status.Backups[len(b.Status.Backups)-1].PGVersion
			}
			if db.Spec.Version == "" {
				return fmt.Errorf("cannot tell the PostgreSQL version: Database %s is gone and the backup records none", b.Spec.DatabaseRef.Name)
			}
			db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: from}
			db.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Database"))
			if dryRun {
				out, err := yaml.Marshal(db)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			if err := e.c.Create(ctx, db); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Created Database %s from DatabaseBackup %s; watch it with kubectl daytwo status %s\n", to, b.Name, to)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "Name of the new Database.")
	f.StringVar(&at, "time", "", "Recover to this time (RFC 3339; Physical backups).")
	f.StringVar(&lsn, "lsn", "", "Recover to this LSN (Physical backups).")
	f.BoolVar(&dryRun, "dry-run", false, "Print the Database instead of creating it.")
	return cmd
}
