package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/version"
)

func reportOperatorCmd(e *env) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "A support bundle (tar.gz) of the operator: its Deployment, pods, logs, leader Lease, webhooks, CRDs and Events",
		Long: "Collects, from every namespace that holds daytwo's operator Deployment: the Deployment, its pods (environment " +
			"values of names that look secret replaced) and every container's log (and the previous one after a restart), " +
			"the Leases and Events of that namespace; daytwo's webhook configurations and CRDs (their schemas left out); " +
			"the plugin's and the operator's versions. No Secret is read.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				out = fmt.Sprintf("daytwo-report-operator-%s.tar.gz", time.Now().UTC().Format("20060102T150405Z"))
			}
			return writeBundleFile(cmd, out, func(w io.Writer) (int, error) { return e.writeOperatorReport(cmd.Context(), w) })
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "The file to write (default daytwo-report-operator-<time>.tar.gz).")
	return cmd
}

func (e *env) writeOperatorReport(ctx context.Context, w io.Writer) (int, error) {
	gz := gzip.NewWriter(w)
	b := &bundle{tw: tar.NewWriter(gz)}
	deps := &appsv1.DeploymentList{}
	if err := e.c.List(ctx, deps, operatorSelector); err != nil {
		return b.n, err
	}
	if len(deps.Items) == 0 {
		return b.n, fmt.Errorf("no operator Deployment found (labels app.kubernetes.io/name=daytwo, app.kubernetes.io/component=operator)")
	}
	vs := versions{Plugin: version.Version}
	for i := range deps.Items {
		d := &deps.Items[i]
		d.ManagedFields = nil
		dir := d.Namespace + "/"
		if err := b.addYAML(dir+"deployment-"+d.Name+".yaml", d); err != nil {
			return b.n, err
		}
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return b.n, err
		}
		for i := range pods.Items {
			pods.Items[i].ManagedFields = nil
			redactPod(&pods.Items[i])
		}
		leases := &coordinationv1.LeaseList{}
		events := &corev1.EventList{}
		for _, part := range []struct {
			file string
			list client.ObjectList
		}{{"leases.yaml", leases}, {"events.yaml", events}} {
			if err := e.c.List(ctx, part.list, client.InNamespace(d.Namespace)); err != nil {
				return b.n, fmt.Errorf("%s: %w", part.file, err)
			}
		}
		for i := range leases.Items {
			leases.Items[i].ManagedFields = nil
		}
		for i := range events.Items {
			events.Items[i].ManagedFields = nil
		}
		for file, obj := range map[string]any{"pods.yaml": pods.Items, "leases.yaml": leases.Items, "events.yaml": events.Items} {
			if err := b.addYAML(dir+file, obj); err != nil {
				return b.n, err
			}
		}
		if err := e.addPodLogs(ctx, b, pods.Items); err != nil {
			return b.n, err
		}
	}
	ops, err := e.operatorVersions(ctx)
	if err != nil {
		return b.n, err
	}
	vs.Operators = ops
	if err := b.addYAML("versions.yaml", vs); err != nil {
		return b.n, err
	}
	var webhooks []client.Object
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	mwcs := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	for _, l := range []client.ObjectList{vwcs, mwcs} {
		if err := e.c.List(ctx, l); err != nil {
			return b.n, err
		}
	}
	for i := range vwcs.Items {
		if strings.Contains(vwcs.Items[i].Name, "daytwo") {
			vwcs.Items[i].ManagedFields = nil
			webhooks = append(webhooks, &vwcs.Items[i])
		}
	}
	for i := range mwcs.Items {
		if strings.Contains(mwcs.Items[i].Name, "daytwo") {
			mwcs.Items[i].ManagedFields = nil
			webhooks = append(webhooks, &mwcs.Items[i])
		}
	}
	if err := b.addYAML("webhookconfigurations.yaml", webhooks); err != nil {
		return b.n, err
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := e.c.List(ctx, crds); err != nil {
		return b.n, err
	}
	var ours []apiextensionsv1.CustomResourceDefinition
	for _, c := range crds.Items {
		if c.Spec.Group == v1alpha1.GroupVersion.Group {
			c.ManagedFields = nil
			for i := range c.Spec.Versions {
				c.Spec.Versions[i].Schema = nil // large, and the release's own
			}
			ours = append(ours, c)
		}
	}
	if err := b.addYAML("crds.yaml", ours); err != nil {
		return b.n, err
	}
	if err := b.tw.Close(); err != nil {
		return b.n, err
	}
	return b.n, gz.Close()
}
