package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// canaryCmd promotes or aborts a WebApp's running canary by writing the
// request annotation; the operator acts on it when the canary is not
// younger than the request, and answers in the WebApp's status.
func canaryCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "canary", Short: "Promote or abort a WebApp's canary"}
	for _, c := range []struct{ verb, short, annotation string }{
		{"promote", "Promote the canary now, skipping the steps left", v1alpha1.AnnotationPromoteRequested},
		{"abort", "Abort the canary: the stable pods stay, its revision is held back", v1alpha1.AnnotationAbortRequested},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   c.verb + " WEBAPP",
			Short: c.short,
			Args:  cobra.ExactArgs(1),
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
