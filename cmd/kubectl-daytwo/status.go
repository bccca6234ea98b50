package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

func statusCmd(e *env) *cobra.Command {
	var out outputFlag
	var watch bool
	cmd := &cobra.Command{
		Use:   "status DATABASE",
		Short: "Instances, roles, lag, backups, verification, pending restarts, certificate and conditions of a Database",
		Long: "Prints the Database's status for a person, or with -o json|yaml the Database and its DatabaseBackups " +
			"(a List) for a script. --watch prints it again at each change until interrupted.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(databases),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			show := func(db *v1alpha1.Database) error {
				backups, err := e.backupsOf(ctx, db.Name)
				if err != nil {
					return err
				}
				if out.format == "" {
					if watch {
						fmt.Fprintf(cmd.OutOrStdout(), "--- %s\n", time.Now().UTC().Format(time.RFC3339))
					}
					printStatus(cmd.OutOrStdout(), db, backups, time.Now())
					return nil
				}
				objs := []runtime.Object{db}
				for i := range backups {
					objs = append(objs, &backups[i])
				}
				return out.print(cmd.OutOrStdout(), objs...)
			}
			if !watch {
				db, err := e.database(ctx, args[0])
				if err != nil {
					return err
				}
				return show(db)
			}
			return e.watchDatabase(ctx, args[0], func(db *v1alpha1.Database) (bool, error) { return false, show(db) })
		},
	}
	out.add(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "Print the status again at each change of the Database, until interrupted.")
	return cmd
}

func (e *env) database(ctx context.Context, name string) (*v1alpha1.Database, error) {
	db := &v1alpha1.Database{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, db); err != nil {
		return nil, fmt.Errorf("the Database %s in namespace %s: %w", name, e.namespace, err)
	}
	return db, nil
}

// backupsOf lists the DatabaseBackups of a Database.
func (e *env) backupsOf(ctx context.Context, db string) ([]v1alpha1.DatabaseBackup, error) {
	list := &v1alpha1.DatabaseBackupList{}
	if err := e.c.List(ctx, list, client.InNamespace(e.namespace)); err != nil {
		return nil, err
	}
	var out []v1alpha1.DatabaseBackup
	for _, b := range list.Items {
		if b.Spec.DatabaseRef.Name == db {
			out = append(out, b)
		}
	}
	return out, nil
}

func ago(t time.Time, now time.Time) string {
	return t.UTC().Format(time.RFC3339) + " (" + duration.HumanDuration(now.Sub(t)) + " ago)"
}

func printStatus(w io.Writer, db *v1alpha1.Database, backups []v1alpha1.DatabaseBackup, now time.Time) {
	st := db.Status
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Database\t%s (namespace %s)\n", db.Name, db.Namespace)
	fmt.Fprintf(tw, "Phase\t%s, %d of %d instances ready\n", orDash(string(st.Phase)), st.ReadyInstances, st.Instances)
	fmt.Fprintf(tw, "PostgreSQL\t%s (image %s)\n", orDash(st.CurrentVersion), orDash(st.CurrentImage))
	fmt.Fprintf(tw, "Primary\t%s\n", orDash(st.Primary))
	if st.TargetPrimary != "" && st.TargetPrimary != st.Primary {
		fmt.Fprintf(tw, "Moving to\t%s\n", st.TargetPrimary)
	}
	fmt.Fprintf(tw, "Endpoint\t%s\n", orDash(st.Endpoint))
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionServerCertificate); c != nil {
		fmt.Fprintf(tw, "Certificate\t%s\n", c.Message)
	}
	if f := st.LastFailover; f != nil {
		fmt.Fprintf(tw, "Last failover\t%s to %s (%s), %d bytes of WAL lacked\n", f.From, f.To, f.Reason, f.LagBytes)
	}
	if s := st.LastSwitchover; s != nil {
		fmt.Fprintf(tw, "Last switchover\t%s to %s: %s %s\n", orDash(s.From), orDash(s.To), s.Result, s.Message)
	}
	if a := st.WALArchive; a != nil && a.LastArchivedTime != nil {
		fmt.Fprintf(tw, "WAL archive\t%s at %s, to DatabaseBackup %s\n", a.LastArchivedWAL, ago(a.LastArchivedTime.Time, now), a.Backup)
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	primaryLSN, _ := lsnOf(st, st.Primary)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tROLE\tTIMELINE\tLSN\tLAG\tSTREAMING\tPENDING RESTART\tERROR")
	for _, in := range st.InstanceStatuses {
		lag, streaming := "-", "-"
		if in.Role == "replica" {
			streaming = map[bool]string{true: "yes", false: "no"}[in.Streaming]
			if l, ok := postgres.ParseLSN(in.LSN); ok && primaryLSN >= l {
				lag = humanBytes(primaryLSN - l)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", in.Name, orDash(in.Role), in.Timeline, orDash(in.LSN), lag, streaming,
			orDash(strings.Join(in.PendingRestart, ",")), orDash(in.Error))
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKUP\tMETHOD\tSCHEDULE\tLAST BACKUP\tRECOVERABLE (UTC)\tLAST VERIFICATION\tSTATE")
	if len(backups) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t\t")
	}
	for _, b := range backups {
		last, verified := "never", "never"
		if b.Status.LastBackupTime != nil {
			last = ago(b.Status.LastBackupTime.Time, now)
		}
		if v := b.Status.LastVerification; v != nil {
			verified = fmt.Sprintf("%s %s", v.Result, ago(v.Time.Time, now))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, orDash(string(b.Spec.Method)), orDash(b.Spec.Schedule), last,
			window(b.Status.Recoverability), verified, backupState(&b))
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tMESSAGE")
	for _, c := range st.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	_ = tw.Flush()
}

// window is the span a restore can reach, "-" before the first backup.
func window(r *v1alpha1.Recoverability) string {
	if r == nil {
		return "-"
	}
	const layout = "2006-01-02 15:04:05"
	return r.FirstPoint.UTC().Format(layout) + " to " + r.LastPoint.UTC().Format(layout)
}

// backupState is the condition of a DatabaseBackup that most needs saying.
func backupState(b *v1alpha1.DatabaseBackup) string {
	for _, t := range []string{v1alpha1.ConditionLastRunFailed, v1alpha1.ConditionBackupStale} {
		if meta.IsStatusConditionTrue(b.Status.Conditions, t) {
			return t + ": " + meta.FindStatusCondition(b.Status.Conditions, t).Message
		}
	}
	if meta.IsStatusConditionFalse(b.Status.Conditions, v1alpha1.ConditionVerified) {
		return "VerificationFailed: " + meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionVerified).Message
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return "-"
}

func lsnOf(st v1alpha1.DatabaseStatus, pod string) (uint64, bool) {
	for _, in := range st.InstanceStatuses {
		if in.Name == pod {
			return postgres.ParseLSN(in.LSN)
		}
	}
	return 0, false
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
