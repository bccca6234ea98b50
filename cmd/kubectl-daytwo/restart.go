package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func restartCmd(e *env) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "restart DATABASE [INSTANCE]",
		Short: "Restart a Database's instances, replicas first, then the primary after a switchover",
		Long: "Restarts each instance by deleting its pod, which the StatefulSet makes again, and waits until it is " +
			"ready before the next. The primary goes last, after a switchover to a restarted replica, so writes pause " +
			"only as long as a switchover. With INSTANCE, only that one (a switchover first when it is the primary). " +
			"A single-instance Database restarts its only instance, and writes stop until it is ready again.",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: e.completeNames(databases, instancesOf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := e.database(ctx, args[0])
			if err != nil {
				return err
			}
			pods := &corev1.PodList{}
			if err := e.c.List(ctx, pods, client.InNamespace(e.namespace), client.MatchingLabels{"daytwo.dev/database": db.Name}); err != nil {
				return err
			}
			var names []string
			for _, p := range pods.Items {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			replicas := len(names) > 1
			if len(args) == 2 {
				if !slices.Contains(names, args[1]) {
					return fmt.Errorf("%s is no instance of Database %s (%v)", args[1], db.Name, names)
				}
				names = []string{args[1]}
			}
			primary := db.Status.Primary
			// Replicas first, the primary last.
			order := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == primary })
			if len(order) < len(names) {
				order = append(order, primary)
			}
			w.wait = true
			for _, name := range order {
				if name == primary && replicas {
					// A restarted replica takes over first.
					if err := requestSwitchover(cmd, e, db.Name, "", w); err != nil {
						return err
					}
				}
				if err := e.restartPod(cmd, w, name); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&w.timeout, "timeout", 10*time.Minute, "How long to wait for each instance, and for the switchover.")
	return cmd
}

// restartPod deletes the instance's pod and waits until the one the
// StatefulSet makes again is ready.
func (e *env) restartPod(cmd *cobra.Command, w waitFlags, name string) error {
	ctx := cmd.Context()
	pod := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, pod); err != nil {
		return err
	}
	old := pod.UID
	if err := e.c.Delete(ctx, pod, client.Preconditions{UID: &old}); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Restarting %s\n", name)
	start := time.Now()
	err := w.until(ctx, name+" to be ready again", func(ctx context.Context) error {
		for {
			p := &corev1.Pod{}
			err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, p)
			if client.IgnoreNotFound(err) != nil {
				return err
			}
			if err == nil && p.UID != old && p.DeletionTimestamp == nil && podReady(p) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s is ready again after %s\n", name, time.Since(start).Round(time.Second))
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
