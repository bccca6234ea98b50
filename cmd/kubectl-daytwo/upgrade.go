package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func upgradeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "upgrade", Short: "Major upgrades: try a failed or held one again"}
	cmd.AddCommand(&cobra.Command{
		Use:   "retry DATABASE",
		Short: "Try a failed major upgrade again, or one its pre-upgrade backup held (annotation " + v1alpha1.AnnotationRetryUpgrade + ")",
		Long: "Sets the annotation to the time now, a value it never had: the operator tries the upgrade to spec.version " +
			"again, from its pre-upgrade backup on. Fix what failed first; the UpgradeFailed condition and the Ready " +
			"message say what it was.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(databases),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := e.database(ctx, args[0])
			if err != nil {
				return err
			}
			if major, _, _ := strings.Cut(db.Status.CurrentVersion, "."); major == db.Spec.Version && !meta.IsStatusConditionTrue(db.Status.Conditions, v1alpha1.ConditionUpgradeFailed) {
				return fmt.Errorf("database %s runs version %s, as its spec asks: there is no upgrade to retry", db.Name, db.Spec.Version)
			}
			patch := client.MergeFrom(db.DeepCopy())
			if db.Annotations == nil {
				db.Annotations = map[string]string{}
			}
			at := time.Now().UTC().Format(time.RFC3339Nano)
			db.Annotations[v1alpha1.AnnotationRetryUpgrade] = at
			if err := e.c.Patch(ctx, db, patch); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Asked Database %s to try its upgrade to %s again (%s=%s); follow it with kubectl daytwo status %s -w\n",
				db.Name, db.Spec.Version, v1alpha1.AnnotationRetryUpgrade, at, db.Name)
			return nil
		},
	})
	return cmd
}
