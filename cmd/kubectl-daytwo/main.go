// kubectl-daytwo is daytwo's kubectl plugin: what a DBA does by hand with
// kubectl, in one command each. Copy it onto PATH and run `kubectl daytwo`.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/scheme"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubeconfig auth providers (OIDC), as kubectl has them
)

// env is what every command works with: the cluster and the namespace.
type env struct {
	flags     *genericclioptions.ConfigFlags
	streams   genericiooptions.IOStreams
	config    *rest.Config
	c         client.WithWatch
	kube      kubernetes.Interface
	namespace string
}

func (e *env) connect() error {
	if e.c != nil {
		return nil
	}
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return err
	}
	ns, _, err := e.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: pluginScheme()})
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
	for flag, v := range map[string]*string{
		"kubeconfig": e.flags.KubeConfig, "context": e.flags.Context, "cluster": e.flags.ClusterName, "user": e.flags.AuthInfoName,
		"server": e.flags.APIServer, "token": e.flags.BearerToken, "as": e.flags.Impersonate, "as-uid": e.flags.ImpersonateUID,
		"certificate-authority": e.flags.CAFile, "client-certificate": e.flags.CertFile, "client-key": e.flags.KeyFile,
		"tls-server-name": e.flags.TLSServerName, "request-timeout": e.flags.Timeout,
	} {
		if v != nil && *v != "" && (flag != "request-timeout" || *v != "0") {
			args = append(args, "--"+flag+"="+*v)
		}
	}
	if g := e.flags.ImpersonateGroup; g != nil {
		for _, group := range *g {
			args = append(args, "--as-group="+group)
		}
	}
	if v := e.flags.Insecure; v != nil && *v {
		args = append(args, "--insecure-skip-tls-verify")
	}
	return args
}

// pluginScheme is daytwo's scheme and the CRDs' own kind, which the
// operator's report reads.
func pluginScheme() *runtime.Scheme {
	s := scheme.New()
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

// Command groups, as kubectl's help shows them.
const (
	groupDatabase = "database"
	groupBackup   = "backup"
	groupWebApp   = "webapp"
	groupSupport  = "support"
)

// offline marks a command that needs no cluster.
const offline = "daytwo.dev/offline"

func main() {
	root := newRootCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := root.ExecuteContext(context.Background()); err != nil {
		if err.Error() != "" {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(exitCode(err))
	}
}

func newRootCmd(streams genericiooptions.IOStreams) *cobra.Command {
	e := &env{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:   "kubectl-daytwo",
		Short: "Operate daytwo Databases, backups and WebApps from kubectl",
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl daytwo",
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Name() == cobra.ShellCompRequestCmd || cmd.Name() == cobra.ShellCompNoDescRequestCmd {
				return nil // completion functions connect when they need to
			}
			for c := cmd; c != nil; c = c.Parent() {
				if c.Annotations[offline] == "true" {
					return nil
				}
			}
			return e.connect()
		},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	e.flags.AddFlags(root.PersistentFlags())
	root.AddGroup(
		&cobra.Group{ID: groupDatabase, Title: "Databases:"},
		&cobra.Group{ID: groupBackup, Title: "Backups and restores:"},
		&cobra.Group{ID: groupWebApp, Title: "WebApps:"},
		&cobra.Group{ID: groupSupport, Title: "Troubleshooting and sizing:"},
	)
	in := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	in(groupDatabase, statusCmd(e), psqlCmd(e), switchoverCmd(e), promoteCmd(e), restartCmd(e), upgradeCmd(e), rotatePasswordCmd(e))
	in(groupDatabase, day2Cmds(e)...)
	in(groupBackup, backupCmd(e), restoreCmd(e))
	in(groupWebApp, canaryCmd(e))
	in(groupSupport, reportCmd(e), logsCmd(e), pgbenchCmd(e), fioCmd(e))
	root.AddCommand(versionCmd(e))
	// cobra's completion and help commands need no cluster.
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" || c.Name() == "help" {
			c.Annotations = map[string]string{offline: "true"}
		}
	}
	return root
}
