package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// outputFlag is -o: "" for the text a person reads, json or yaml for a
// script, as kubectl prints them.
type outputFlag struct{ format string }

func (o *outputFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "Output format: json or yaml (default: text).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

func (o *outputFlag) validate() error {
	if !slices.Contains([]string{"", "json", "yaml"}, o.format) {
		return fmt.Errorf("--output %q: want json or yaml", o.format)
	}
	return nil
}

// print writes objs with kubectl's printer: one object as it is, several
// as a List.
func (o *outputFlag) print(w io.Writer, objs ...runtime.Object) error {
	var p printers.ResourcePrinter = &printers.JSONPrinter{}
	if o.format == "yaml" {
		p = &printers.YAMLPrinter{}
	}
	if err := setKinds(objs); err != nil {
		return err
	}
	if len(objs) == 1 {
		return p.PrintObj(objs[0], w)
	}
	list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for _, obj := range objs {
		list.Items = append(list.Items, runtime.RawExtension{Object: obj})
	}
	return p.PrintObj(list, w)
}

// printDryRun writes objs as YAML documents a user can apply: what a
// --dry-run would create.
func printDryRun(w io.Writer, objs ...runtime.Object) error {
	if err := setKinds(objs); err != nil {
		return err
	}
	p := &printers.YAMLPrinter{}
	for _, obj := range objs {
		if err := p.PrintObj(obj, w); err != nil {
			return err
		}
	}
	return nil
}

// setKinds gives each of objs its kind and API version, which a typed
// object read or built in Go leaves out.
func setKinds(objs []runtime.Object) error {
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, pluginScheme())
		if err != nil {
			return err
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return nil
}
