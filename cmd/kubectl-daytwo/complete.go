package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// completeNames completes the first argument with the names of the
// namespace's objects of list's kind; later ones complete with then, when
// given (the pods of the Database the first names). A cluster it cannot
// reach completes nothing.
func (e *env) completeNames(list func() client.ObjectList, then ...func(args []string) client.ObjectList) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var l client.ObjectList
		var opts []client.ListOption
		switch i := len(args); {
		case i == 0:
			l = list()
		case i > 0 && i <= len(then):
			l = then[i-1](args)
			if _, ok := l.(*corev1.PodList); ok {
				opts = append(opts, client.MatchingLabels{"daytwo.dev/database": args[0]})
			}
		default:
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if e.connect() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		// A shell waits for the answer: a cluster that does not answer
		// completes nothing.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := e.c.List(ctx, l, append(opts, client.InNamespace(e.namespace))...); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			if name := o.(client.Object).GetName(); strings.HasPrefix(name, prefix) {
				names = append(names, name)
			}
			return nil
		})
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func databases() client.ObjectList { return &v1alpha1.DatabaseList{} }
func backups() client.ObjectList   { return &v1alpha1.DatabaseBackupList{} }
func webApps() client.ObjectList   { return &v1alpha1.WebAppList{} }

// instancesOf lists the pods of the Database named in the first argument.
func instancesOf([]string) client.ObjectList { return &corev1.PodList{} }
