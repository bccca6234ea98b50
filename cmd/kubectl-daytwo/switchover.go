package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// requestSwitchover writes the switchover annotations: the operator, and
// only it, decides and answers in status.lastSwitchover.
func requestSwitchover(cmd *cobra.Command, e *env, name, to string, w waitFlags) error {
	ctx := cmd.Context()
	db, err := e.database(ctx, name)
	if err != nil {
		return err
	}
	if to != "" && to == db.Status.Primary {
		return fmt.Errorf("%s is already the primary of %s", to, name)
	}
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	// A request is a time newer than the last one answered (and than one
	// pending): two within a second must still be two.
	var last time.Time
	if s := db.Status.LastSwitchover; s != nil {
		last = s.RequestedTime.Time
	}
	at := laterThan(last, db.Annotations[v1alpha1.AnnotationSwitchoverRequested])
	db.Annotations[v1alpha1.AnnotationSwitchoverRequested] = at
	if to != "" {
		db.Annotations[v1alpha1.AnnotationSwitchoverTo] = to
	} else {
		delete(db.Annotations, v1alpha1.AnnotationSwitchoverTo)
	}
	if err := e.c.Patch(ctx, db, patch); err != nil {
		return err
	}
	target := to
	if target == "" {
		target = "the replica with the most WAL"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Requested a switchover of %s from %s to %s at %s; status.lastSwitchover answers\n", name, db.Status.Primary, target, at)
	if !w.wait {
		return nil
	}
	requested, _ := time.Parse(time.RFC3339, at)
	_, err = waitSwitchover(cmd, e, w, name, requested)
	return err
}

// waitSwitchover waits for status.lastSwitchover to answer the request
// made at requested, and returns the new primary; a refusal or failure
// exits 1.
func waitSwitchover(cmd *cobra.Command, e *env, w waitFlags, name string, requested time.Time) (string, error) {
	var primary string
	err := w.until(cmd.Context(), "the switchover of "+name, func(ctx context.Context) error {
		return e.watchDatabase(ctx, name, func(db *v1alpha1.Database) (bool, error) {
			s := db.Status.LastSwitchover
			if s == nil || !s.RequestedTime.Time.Equal(requested) {
				return false, nil
			}
			if s.Result != v1alpha1.SwitchoverSucceeded {
				return true, exitError{code: exitFailed, err: fmt.Errorf("the switchover of %s: %s: %s", name, s.Result, s.Message)}
			}
			if db.Status.Primary != s.To {
				return false, nil // answered; the status names the new primary next
			}
			primary = s.To
			fmt.Fprintf(cmd.OutOrStdout(), "Switched over from %s to %s: %s\n", s.From, s.To, s.Message)
			return true, nil
		})
	})
	return primary, err
}

func switchoverCmd(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:               "switchover DATABASE [INSTANCE]",
		Short:             "Move the primary to an instance (or the best replica) with no acknowledged write lost",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: e.completeNames(databases, instancesOf),
		RunE: func(cmd *cobra.Command, args []string) error {
			to := ""
			if len(args) == 2 {
				to = args[1]
			}
			return requestSwitchover(cmd, e, args[0], to, w)
		},
	}
	w.add(cmd, "the new primary serves (exit code 1 when the switchover was refused or failed, 2 on --timeout)")
	return cmd
}

func promoteCmd(e *env) *cobra.Command {
	var token string
	var w waitFlags
	cmd := &cobra.Command{
		Use:               "promote DATABASE [INSTANCE]",
		ValidArgsFunction: e.completeNames(databases, instancesOf),
		Short: "Make INSTANCE the primary (a switchover to it); without one, promote a replica Database (spec.replica.enabled: false), " +
			"with --demotion-token for a planned switch",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if token != "" {
					return errors.New("--demotion-token promotes a replica Database: name no instance")
				}
				return requestSwitchover(cmd, e, args[0], args[1], w)
			}
			return promoteReplica(cmd, e, args[0], token)
		},
	}
	cmd.Flags().StringVar(&token, "demotion-token", "", "The demoted source's status.replica.demotionToken: a planned switch that loses nothing")
	w.add(cmd, "INSTANCE serves as the primary (with INSTANCE only)")
	return cmd
}

// promoteReplica declares a replica Database's promotion, with the
// demoted source's token for a planned switch.
func promoteReplica(cmd *cobra.Command, e *env, name, token string) error {
	db, err := e.database(cmd.Context(), name)
	if err != nil {
		return err
	}
	switch {
	case db.Spec.Replica == nil:
		return fmt.Errorf("database %s is no replica (it has no spec.replica): name the instance to switch over to", name)
	case !db.Spec.Replica.Enabled:
		return fmt.Errorf("database %s is promoted already", name)
	}
	if token != "" {
		if _, err := instanceapi.ParseDemotionToken(token); err != nil {
			return fmt.Errorf("--demotion-token: %w", err)
		}
	}
	patch := client.MergeFrom(db.DeepCopy())
	db.Spec.Replica.Enabled, db.Spec.Replica.PromotionToken = false, token
	if err := e.c.Patch(cmd.Context(), db, patch); err != nil {
		return err
	}
	if token != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "Database %s is promoted once an instance has replayed up to the demoted source's token; "+
			"the source serves no more. To go back, demote %s the same way\n", name, name)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Database %s is promoted: its most advanced instance claims the source's WAL archive (promotion: %s) "+
		"and serves writes; the source stops serving once it sees the claim\n", name, db.Spec.Replica.Promotion)
	return nil
}
