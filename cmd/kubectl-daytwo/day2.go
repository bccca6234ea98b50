package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// day2Cmds are the declared Day-2 verbs: each patches the Database the way
// a GitOps change would, and the operator answers in its status.
func day2Cmds(e *env) []*cobra.Command {
	verb := func(use, short string, change func(ctx context.Context, db *v1alpha1.Database) (string, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " DATABASE",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				db, err := e.database(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				patch := client.MergeFrom(db.DeepCopy())
				if db.Annotations == nil {
					db.Annotations = map[string]string{}
				}
				said, err := change(cmd.Context(), db)
				if err != nil {
					return err
				}
				if err := e.c.Patch(cmd.Context(), db, patch); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), said)
				return nil
			},
		}
	}
	return []*cobra.Command{
		verb("hibernate", "Stop every instance and keep the volumes (spec.hibernation: On)", func(_ context.Context, db *v1alpha1.Database) (string, error) {
			db.Spec.Hibernation = v1alpha1.HibernationOn
			return fmt.Sprintf("Database %s hibernates: its instances stop, its volumes stay; Ready says Hibernated once none runs", db.Name), nil
		}),
		verb("wake", "Start a hibernated Database's instances again (spec.hibernation: Off)", func(_ context.Context, db *v1alpha1.Database) (string, error) {
			db.Spec.Hibernation = v1alpha1.HibernationOff
			return fmt.Sprintf("Database %s wakes: its instances start where they stopped", db.Name), nil
		}),
		verb("pause", "Stop daytwo from acting on a Database; it keeps running", func(_ context.Context, db *v1alpha1.Database) (string, error) {
			db.Annotations[v1alpha1.AnnotationReconcile] = v1alpha1.ReconcilePaused
			return fmt.Sprintf("daytwo leaves Database %s as it is (no failover, rollout or repair) until `kubectl daytwo resume %s`", db.Name, db.Name), nil
		}),
		verb("resume", "Let daytwo act on a paused Database again", func(_ context.Context, db *v1alpha1.Database) (string, error) {
			delete(db.Annotations, v1alpha1.AnnotationReconcile)
			return fmt.Sprintf("daytwo manages Database %s again", db.Name), nil
		}),
		verb("approve-primary-update", "Let the primary's planned restart happen now, outside the maintenance window", func(ctx context.Context, db *v1alpha1.Database) (string, error) {
			sts := &appsv1.StatefulSet{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts); err != nil {
				return "", err
			}
			revision := sts.Status.UpdateRevision
			if revision == "" || revision == sts.Status.CurrentRevision {
				return "", fmt.Errorf("no restart of Database %s's primary waits for a maintenance window", db.Name)
			}
			db.Annotations[v1alpha1.AnnotationApprovePrimaryUpdate] = revision
			return fmt.Sprintf("Approved the primary's restart for revision %s of Database %s", revision, db.Name), nil
		}),
	}
}
