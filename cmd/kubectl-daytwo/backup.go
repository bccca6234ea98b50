package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func backupCmd(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "backup DATABASE|DATABASEBACKUP",
		Short: "Run a backup now, besides the schedule",
		Long: "Asks a DatabaseBackup for one run now (annotation " + v1alpha1.AnnotationBackupRequested + "). " +
			"Given a Database, its one DatabaseBackup runs (the one spec.backup manages, if several).",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(backups),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			b, err := e.backupFor(ctx, args[0])
			if err != nil {
				return err
			}
			var last time.Time
			if b.Status.LastScheduleTime != nil {
				last = b.Status.LastScheduleTime.Time
			}
			at := laterThan(last, b.Annotations[v1alpha1.AnnotationBackupRequested])
			patch := client.MergeFrom(b.DeepCopy())
			if b.Annotations == nil {
				b.Annotations = map[string]string{}
			}
			b.Annotations[v1alpha1.AnnotationBackupRequested] = at
			if err := e.c.Patch(ctx, b, patch); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Requested a run of DatabaseBackup %s (Database %s) at %s\n", b.Name, b.Spec.DatabaseRef.Name, at)
			if !w.wait {
				return nil
			}
			requested, _ := time.Parse(time.RFC3339, at)
			return w.until(ctx, "the run of DatabaseBackup "+b.Name, func(ctx context.Context) error {
				return watchObject(ctx, e, b, &v1alpha1.DatabaseBackupList{}, func(b *v1alpha1.DatabaseBackup) (bool, error) {
					return runEnded(cmd, b, requested)
				})
			})
		},
	}
	w.add(cmd, "the run ends (exit code 1 when it failed, 2 on --timeout)")
	cmd.AddCommand(backupListCmd(e))
	return cmd
}

// runEnded says whether the run asked for at requested ended, and fails
// when it failed.
func runEnded(cmd *cobra.Command, b *v1alpha1.DatabaseBackup, requested time.Time) (bool, error) {
	st := b.Status
	if st.LastScheduleTime == nil || st.LastScheduleTime.Before(&metav1.Time{Time: requested}) || len(st.ActiveJobs) > 0 {
		return false, nil
	}
	started := st.LastScheduleTime
	switch {
	case st.LastFailureTime != nil && !st.LastFailureTime.Before(started):
		msg := ""
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionLastRunFailed); c != nil {
			msg = ": " + c.Message
		}
		return true, exitError{code: exitFailed, err: fmt.Errorf("the run of DatabaseBackup %s failed%s", b.Name, msg)}
	case st.LastBackupTime != nil && !st.LastBackupTime.Before(started):
		fmt.Fprintf(cmd.OutOrStdout(), "DatabaseBackup %s: the run started at %s succeeded at %s\n", b.Name,
			started.UTC().Format(time.RFC3339), st.LastBackupTime.UTC().Format(time.RFC3339))
		return true, nil
	}
	return false, nil
}

// laterThan is now as an RFC 3339 request time, moved past last and past
// the pending request (an annotation's value), so that it asks again.
func laterThan(last time.Time, pending string) string {
	at := time.Now().UTC().Truncate(time.Second)
	if p, err := time.Parse(time.RFC3339, pending); err == nil && p.After(last) {
		last = p
	}
	if !at.After(last) {
		at = last.UTC().Truncate(time.Second).Add(time.Second)
	}
	return at.Format(time.RFC3339)
}

// backupFor is the DatabaseBackup named name, or the one of the Database
// named name.
func (e *env) backupFor(ctx context.Context, name string) (*v1alpha1.DatabaseBackup, error) {
	b := &v1alpha1.DatabaseBackup{}
	err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, b)
	if err == nil {
		return b, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if _, err := e.database(ctx, name); err != nil {
		return nil, fmt.Errorf("%s is neither a DatabaseBackup nor a Database in namespace %s", name, e.namespace)
	}
	backups, err := e.backupsOf(ctx, name)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range backups {
		if backups[i].Name == name+"-backup" || len(backups) == 1 {
			return &backups[i], nil
		}
		names = append(names, backups[i].Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("the Database %s has no DatabaseBackup: declare spec.backup, or create one", name)
	}
	return nil, fmt.Errorf("the Database %s has several DatabaseBackups (%s): name one", name, strings.Join(names, ", "))
}
