package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func backupCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "backup DATABASE|DATABASEBACKUP",
		Short: "Run a backup now, besides the schedule",
		Long: "Asks a DatabaseBackup for one run now (annotation " + v1alpha1.AnnotationBackupRequested + "). " +
			"Given a Database, its one DatabaseBackup runs (the one spec.backup manages, if several).",
		Args: cobra.ExactArgs(1),
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
			fmt.Fprintf(cmd.OutOrStdout(), "Requested a run of DatabaseBackup %s (Database %s) at %s; follow it with kubectl get databasebackup %s -w\n",
				b.Name, b.Spec.DatabaseRef.Name, at, b.Name)
			return nil
		},
	}
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
