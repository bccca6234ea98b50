// kubectl-daytwo is daytwo's kubectl plugin: what a DBA does by hand with
// kubectl, in one command each. Copy it onto PATH and run `kubectl daytwo`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/scheme"
)

// env is what every command works with: the cluster and the namespace.
type env struct {
	flags     clientcmd.ConfigOverrides
	loading   *clientcmd.ClientConfigLoadingRules
	config    *rest.Config
	c         client.Client
	kube      kubernetes.Interface
	namespace string
}

func (e *env) connect() error {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(e.loading, &e.flags)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	e.config, e.c, e.kube, e.namespace = cfg, c, kube, ns
	return nil
}

// kubectlArgs passes the connection flags on to kubectl.
func (e *env) kubectlArgs() []string {
	args := []string{"--namespace", e.namespace}
	if e.loading.ExplicitPath != "" {
		args = append(args, "--kubeconfig", e.loading.ExplicitPath)
	}
	if e.flags.CurrentContext != "" {
		args = append(args, "--context", e.flags.CurrentContext)
	}
	return args
}

func main() {
	e := &env{loading: clientcmd.NewDefaultClientConfigLoadingRules()}
	root := &cobra.Command{
		Use:           "kubectl-daytwo",
		Short:         "Operate daytwo Databases, backups and WebApps from kubectl",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return e.connect()
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&e.loading.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file.")
	f.StringVar(&e.flags.CurrentContext, "context", "", "The kubeconfig context to use.")
	f.StringVarP(&e.flags.Context.Namespace, "namespace", "n", "", "The namespace (default: the context's).")
	root.AddCommand(statusCmd(e), psqlCmd(e), backupCmd(e), restoreCmd(e), switchoverCmd(e), promoteCmd(e), canaryCmd(e), reportCmd(e), logsCmd(e), rotatePasswordCmd(e))
	root.AddCommand(day2Cmds(e)...)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
