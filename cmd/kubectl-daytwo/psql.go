package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func psqlCmd(e *env) *cobra.Command {
	var replica bool
	cmd := &cobra.Command{
		Use:   "psql DATABASE [-- PSQL ARGS...]",
		Short: "psql as the superuser on the primary (or a replica), in the application database",
		Long: "Runs psql in the instance's postgres container over its local socket, through kubectl exec: " +
			"no password leaves the cluster. Arguments after -- go to psql.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := e.database(ctx, args[0])
			if err != nil {
				return err
			}
			target := db.Status.Primary
			if replica {
				target = ""
				for _, in := range db.Status.InstanceStatuses {
					if in.Role == string(instanceapi.RoleReplica) && in.Streaming {
						target = in.Name
						break
					}
				}
			}
			if target == "" {
				return fmt.Errorf("the Database %s has no %s to connect to (status.primary and status.instanceStatuses)", db.Name,
					map[bool]string{true: "streaming replica", false: "primary"}[replica])
			}
			if db.Status.Database == "" {
				return fmt.Errorf("the Database %s has no application database in its status yet (status.database)", db.Name)
			}
			kargs := append(e.kubectlArgs(), "exec", "-i")
			if term.IsTerminal(int(os.Stdin.Fd())) {
				kargs = append(kargs, "-t")
			}
			kargs = append(kargs, target, "-c", "postgres", "--", "psql", "-h", instanceapi.RunDir, "-U", "postgres", "-d", db.Status.Database)
			kargs = append(kargs, args[1:]...)
			k := exec.CommandContext(ctx, "kubectl", kargs...)
			k.Stdin, k.Stdout, k.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			return k.Run()
		},
	}
	cmd.Flags().BoolVar(&replica, "replica", false, "Connect to a streaming replica instead of the primary.")
	return cmd
}
