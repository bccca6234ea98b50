// Command daytwo is the single daytwo binary: the operator, the in-pod
// instance manager, and the backup and restore jobs.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/daytwo-dev/daytwo/internal/version"

	// Public CA roots for object stores (S3, GCS, R2), used only where the
	// system has none: the PostgreSQL images carry no CA certificates.
	_ "golang.org/x/crypto/x509roots/fallback"
	// Time zones for schedules, in an image without /usr/share/zoneinfo.
	_ "time/tzdata"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "daytwo",
		Short:         "daytwo runs web apps and PostgreSQL on Kubernetes through Day 2",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newOperatorCommand(), newInstanceCommand(), newPoolerCommand(), newBackupCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the daytwo version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.Version)
		},
	}
}
