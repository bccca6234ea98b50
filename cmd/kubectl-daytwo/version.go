package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/daytwo-dev/daytwo/internal/version"
)

// operatorSelector selects daytwo's operator Deployment, however it was
// installed (config/default or the chart).
var operatorSelector = client.MatchingLabels{"app.kubernetes.io/name": "daytwo", "app.kubernetes.io/component": "operator"}

type versions struct {
	Plugin    string            `json:"plugin"`
	Operators []operatorVersion `json:"operators,omitempty"`
}

type operatorVersion struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Version   string `json:"version"`
}

func versionCmd(e *env) *cobra.Command {
	var out outputFlag
	var clientOnly bool
	cmd := &cobra.Command{
		Use:         "version",
		Short:       "The plugin's version and the operator's, with a warning when their minor versions differ",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{offline: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			v := versions{Plugin: version.Version}
			var findErr error
			if !clientOnly {
				if findErr = e.connect(); findErr == nil {
					v.Operators, findErr = e.operatorVersions(cmd.Context())
				}
			}
			if err := printVersions(cmd, out, v); err != nil {
				return err
			}
			if findErr != nil {
				return fmt.Errorf("the operator's version: %w", findErr)
			}
			for _, o := range v.Operators {
				if skew := versionSkew(v.Plugin, o.Version); skew != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %s\n", skew)
				}
			}
			return nil
		},
	}
	out.add(cmd)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "The plugin's version only; no cluster is asked.")
	return cmd
}

func printVersions(cmd *cobra.Command, out outputFlag, v versions) error {
	w := cmd.OutOrStdout()
	switch out.format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	fmt.Fprintf(w, "Plugin: %s\n", v.Plugin)
	for _, o := range v.Operators {
		fmt.Fprintf(w, "Operator: %s (Deployment %s/%s)\n", o.Version, o.Namespace, o.Name)
	}
	return nil
}

// operatorVersions finds the operator's Deployments in every namespace
// the user may list, and reads their version: the label
// app.kubernetes.io/version, else the image's tag.
func (e *env) operatorVersions(ctx context.Context) ([]operatorVersion, error) {
	list := &appsv1.DeploymentList{}
	if err := e.c.List(ctx, list, operatorSelector); err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no Deployment labelled app.kubernetes.io/name=daytwo, app.kubernetes.io/component=operator")
	}
	var out []operatorVersion
	for _, d := range list.Items {
		v := d.Labels["app.kubernetes.io/version"]
		if v == "" && len(d.Spec.Template.Spec.Containers) > 0 {
			image := d.Spec.Template.Spec.Containers[0].Image
			image, _, _ = strings.Cut(image, "@")
			if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
				v = image[i+1:]
			}
		}
		out = append(out, operatorVersion{Namespace: d.Namespace, Name: d.Name, Version: v})
	}
	return out, nil
}

// versionSkew says why the plugin and an operator may not agree, or "":
// the same major and minor version is fine, as kubectl's own skew policy
// goes for patch releases.
func versionSkew(plugin, operator string) string {
	p, perr := utilversion.ParseSemantic(plugin)
	o, oerr := utilversion.ParseSemantic(operator)
	switch {
	case perr != nil || oerr != nil:
		if plugin != operator {
			return fmt.Sprintf("the plugin (%s) and the operator (%s) are not released versions that can be compared", plugin, operator)
		}
		return ""
	case p.Major() != o.Major() || p.Minor() != o.Minor():
		return fmt.Sprintf("the plugin is %s and the operator %s: use the plugin of the operator's minor version", plugin, operator)
	}
	return ""
}
