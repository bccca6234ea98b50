package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// canaryCmd promotes or aborts a WebApp's running canary by writing the
// request annotation; the operator acts on it when the canary is not
// younger than the request, and answers in the WebApp's status.
func canaryCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "canary", Short: "Follow, promote or abort a WebApp's canary"}
	cmd.AddCommand(canaryStatusCmd(e))
	for _, c := range []struct{ verb, short, annotation string }{
		{"promote", "Promote the canary now, skipping the steps left", v1alpha1.AnnotationPromoteRequested},
		{"abort", "Abort the canary: the stable pods stay, its revision is held back", v1alpha1.AnnotationAbortRequested},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:               c.verb + " WEBAPP",
			Short:             c.short,
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: e.completeNames(webApps),
			RunE: func(cmd *cobra.Command, args []string) error {
				return requestCanary(cmd, e, args[0], c.verb, c.annotation)
			},
		})
	}
	return cmd
}

func requestCanary(cmd *cobra.Command, e *env, name, verb, annotation string) error {
	ctx := cmd.Context()
	app := &v1alpha1.WebApp{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, app); err != nil {
		return err
	}
	c := app.Status.Canary
	if c == nil || c.Step == 0 {
		return fmt.Errorf("WebApp %s runs no canary", name)
	}
	patch := client.MergeFrom(app.DeepCopy())
	if app.Annotations == nil {
		app.Annotations = map[string]string{}
	}
	at := time.Now().UTC().Format(time.RFC3339)
	app.Annotations[annotation] = at
	if err := e.c.Patch(ctx, app, patch); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Requested to %s the canary of %s (image %s, step %d of %d) at %s\n", verb, name, c.CanaryImage, c.Step, c.Steps, at)
	return nil
}

// rolloutState is where a WebApp's rollout of its spec stands.
type rolloutState int

const (
	rolloutRunning rolloutState = iota
	rolloutDone
	rolloutFailed
)

// rolloutFailures are the reasons a rollout ends on without the spec's
// revision: no waiting brings it.
var rolloutFailures = map[string]bool{
	v1alpha1.ReasonCanaryAborted: true, v1alpha1.ReasonRolledBack: true,
	v1alpha1.ReasonProgressDeadlineExceeded: true, v1alpha1.ReasonPodSecurityViolation: true,
}

// rolloutOf reads app's status: done once the spec's revision runs on
// every pod with no canary left, failed once its canary aborted or it
// rolled back, running otherwise; and a line that says so.
func rolloutOf(app *v1alpha1.WebApp) (rolloutState, string) {
	st := app.Status
	if st.ObservedGeneration < app.Generation {
		return rolloutRunning, "waiting for daytwo to observe the latest spec"
	}
	degraded := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
	progressing := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing)
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	for _, c := range []*metav1.Condition{degraded, progressing, ready} {
		if c != nil && c.Status != metav1.ConditionUnknown && rolloutFailures[c.Reason] &&
			(c.Type != v1alpha1.ConditionProgressing || c.Status == metav1.ConditionFalse) {
			return rolloutFailed, fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	if c := st.Canary; c != nil && c.Step > 0 {
		line := fmt.Sprintf("step %d of %d: canary %s on %d pods (%d%%), stable %s on %d", c.Step, c.Steps, c.CanaryImage,
			c.CanaryReplicas, c.CanaryWeight, c.StableImage, c.StableReplicas)
		if progressing != nil && progressing.Reason == v1alpha1.ReasonCanaryWaiting {
			line += "; waiting for kubectl daytwo canary promote " + app.Name
		}
		if c.Message != "" {
			line += ": " + c.Message
		}
		return rolloutRunning, line
	}
	if ready != nil && ready.Status == metav1.ConditionTrue && st.CurrentImage == app.Spec.Image &&
		(progressing == nil || progressing.Status == metav1.ConditionFalse) && st.AvailableReplicas >= st.Replicas {
		return rolloutDone, fmt.Sprintf("%s runs on %d of %d pods", st.CurrentImage, st.AvailableReplicas, st.Replicas)
	}
	if progressing != nil && progressing.Message != "" {
		return rolloutRunning, progressing.Message
	}
	return rolloutRunning, fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, st.Replicas)
}

// canaryStatusCmd follows a rollout as a pipeline wants it: exit 0 when
// the spec's revision runs everywhere, 1 when its canary aborted or it was
// rolled back, 2 when --timeout runs out first (Argo Rollouts' status
// does the same).
func canaryStatusCmd(e *env) *cobra.Command {
	var watch bool
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "status WEBAPP",
		Short: "Where the WebApp's rollout (canary steps included) stands; --watch until it ends, with exit codes for pipelines",
		Long: "Prints the rollout's state. With --watch, prints each change until the rollout ends: exit code 0 when the " +
			"spec's revision runs on every pod, 1 when its canary aborted or it was rolled back, 2 when --timeout runs out. " +
			"Without --watch, the exit code says the same of the state now, and 3 means it still runs.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(webApps),
		RunE: func(cmd *cobra.Command, args []string) error {
			app := &v1alpha1.WebApp{}
			app.Namespace, app.Name = e.namespace, args[0]
			var last string
			var state rolloutState
			report := func(a *v1alpha1.WebApp) (bool, error) { //nolint:unparam // watchObject's callback; a report cannot fail
				var line string
				state, line = rolloutOf(a)
				if line != last {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", time.Now().UTC().Format(time.RFC3339), a.Name, line)
					last = line
				}
				return state != rolloutRunning || !watch, nil
			}
			err := w.until(cmd.Context(), "the rollout of "+args[0], func(ctx context.Context) error {
				return watchObject(ctx, e, app, &v1alpha1.WebAppList{}, report)
			})
			switch {
			case err != nil:
				return err
			case state == rolloutFailed:
				return exitError{code: exitFailed, err: fmt.Errorf("the rollout of %s failed", args[0])}
			case state == rolloutRunning:
				return exitError{code: exitRunning, err: errSilent}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "Follow the rollout until it ends.")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 30*time.Minute, "How long --watch follows before it exits with code 2.")
	return cmd
}
