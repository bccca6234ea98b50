package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func restoreCmd(e *env) *cobra.Command {
	var to, at, lsn string
	var dryRun bool
	var instances int32
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "restore DATABASEBACKUP --to NEW-DATABASE [--time T | --lsn L]",
		Short: "Create a Database restored from a backup, at a point in time if asked",
		Long: "Writes a new Database whose spec.bootstrap.fromBackup names the DatabaseBackup (and targetTime or targetLSN), " +
			"with the spec of the Database the backup was taken of when it still exists (instances, parameters, replication, " +
			"TLS, backup, roles, pooler, placement...), less what must not follow a copy: its bootstrap, replica source, " +
			"hibernation and fenced instances. Without that Database, the version the backup recorded. --dry-run prints it to edit.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(backups),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if to == "" {
				return fmt.Errorf("--to names the new Database")
			}
			b := &v1alpha1.DatabaseBackup{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: args[0]}, b); err != nil {
				return fmt.Errorf("DatabaseBackup %s: %w", args[0], err)
			}
			from, err := restoreTarget(b.Name, at, lsn)
			if err != nil {
				return err
			}
			db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: to, Namespace: e.namespace}}
			if src, err := e.database(ctx, b.Spec.DatabaseRef.Name); err == nil {
				db.Spec = restoredSpec(src)
			} else if len(b.Status.Backups) > 0 {
				// Newest first; "17.6 (Debian 17.6-1)" is version 17.
				if f := strings.FieldsFunc(b.Status.Backups[0].PGVersion, func(r rune) bool { return r == '.' || r == ' ' }); len(f) > 0 {
					db.Spec.Version = f[0]
				}
			}
			if db.Spec.Version == "" {
				return fmt.Errorf("cannot tell the PostgreSQL version: Database %s is gone and the backup records none", b.Spec.DatabaseRef.Name)
			}
			db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: from}
			if instances > 0 {
				db.Spec.Instances = &instances
			}
			if dryRun {
				return printDryRun(cmd.OutOrStdout(), db)
			}
			if err := e.c.Create(ctx, db); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Created Database %s from DatabaseBackup %s; watch it with kubectl daytwo status %s -w\n", to, b.Name, to)
			if !w.wait {
				return nil
			}
			return w.until(ctx, "Database "+to+" to be restored and Ready", func(ctx context.Context) error {
				return e.watchDatabase(ctx, to, func(d *v1alpha1.Database) (bool, error) {
					ready := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionReady)
					switch {
					case ready == nil || d.Status.ObservedGeneration < d.Generation:
						return false, nil
					case ready.Status == metav1.ConditionTrue:
						fmt.Fprintf(cmd.OutOrStdout(), "Database %s is Ready: %s\n", to, ready.Message)
						return true, nil
					case ready.Reason == v1alpha1.ReasonRestoreFailed:
						return true, exitError{code: exitFailed, err: fmt.Errorf("the restore of %s failed: %s", to, ready.Message)}
					}
					return false, nil
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "Name of the new Database.")
	f.StringVar(&at, "time", "", "Recover to this time (RFC 3339; Physical backups).")
	f.StringVar(&lsn, "lsn", "", "Recover to this LSN (Physical backups).")
	f.BoolVar(&dryRun, "dry-run", false, "Print the Database instead of creating it.")
	f.Int32Var(&instances, "instances", 0, "Instances of the new Database (default: the source's).")
	w.add(cmd, "the new Database is Ready (exit code 1 when its restore failed, 2 on --timeout)")
	return cmd
}

func restoreTarget(backup, at, lsn string) (*v1alpha1.BootstrapFromBackup, error) {
	from := &v1alpha1.BootstrapFromBackup{BackupRef: v1alpha1.LocalObjectReference{Name: backup}}
	if at != "" && lsn != "" {
		return nil, fmt.Errorf("--time and --lsn: give one")
	}
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, fmt.Errorf("--time %q: want RFC 3339, such as 2026-11-25T10:00:00Z: %w", at, err)
		}
		from.TargetTime = &metav1.Time{Time: t}
	}
	from.TargetLSN = lsn
	return from, nil
}

// restoredSpec is src's spec for a copy restored from its backup: all of
// it but how src came to be and what holds src's own instances.
func restoredSpec(src *v1alpha1.Database) v1alpha1.DatabaseSpec {
	spec := *src.Spec.DeepCopy()
	spec.Bootstrap, spec.Replica, spec.FencedInstances = nil, nil, nil
	spec.Hibernation = ""
	return spec
}
