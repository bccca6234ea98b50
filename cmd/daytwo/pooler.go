package main

import (
	"fmt"
	"net"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pooler"
)

func newPoolerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pooler",
		Short: "The in-pod PgBouncer manager of a Database's pool",
	}
	var fl instanceapi.PoolerFlags
	run := &cobra.Command{
		Use:   "run",
		Short: "Configure and run PgBouncer, serve its metrics and the operator's pause and resume",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fl.Target == "" {
				return fmt.Errorf("--target is required")
			}
			if fl.PoolMode != "transaction" && fl.PoolMode != "session" {
				return fmt.Errorf("--pool-mode must be transaction or session, not %q", fl.PoolMode)
			}
			// SIGTERM (pod deletion) shuts PgBouncer down safely.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			m, err := pooler.New(pooler.Config{PoolerFlags: fl,
				APIAddr:     net.JoinHostPort("", strconv.Itoa(instanceapi.Port)),
				MetricsAddr: net.JoinHostPort("", strconv.Itoa(instanceapi.MetricsPort)),
			}, zap.New(zap.UseDevMode(false)).WithName("pooler"))
			if err != nil {
				return err
			}
			return m.Run(ctx)
		},
	}
	fl.Bind(run.Flags())
	cmd.AddCommand(run)
	return cmd
}
