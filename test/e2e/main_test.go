//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

var (
	cluster *framework.Cluster
	// operatorProcess is set in kwok mode, where the operator runs on the host.
	operatorProcess *framework.Process
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	cluster, err = framework.Connect()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("e2e: mode %s\n", cluster.Mode)
	if cluster.Mode == framework.ModeKwok {
		operatorProcess, err = framework.StartOperatorProcess()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer operatorProcess.Stop()
	}
	if err := startPrometheus(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: prometheus:", err)
		return 1
	}
	if prometheus != nil {
		defer prometheus.Stop()
	}
	code := m.Run()
	// Every suite has run: the operator must have survived them all, under
	// the RBAC it ships, without a panic.
	if err := cluster.CheckOperator(context.Background(), operatorProcess); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: operator check:", err)
		return 1
	}
	fmt.Println("e2e: operator healthy, no forbidden errors or panics in its log")
	if audit := os.Getenv("DAYTWO_E2E_AUDIT_LOG"); audit != "" && code == 0 {
		summary, err := framework.CheckVerbs(audit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: verb check:", summary+":", err)
			return 1
		}
		fmt.Println("e2e: every verb the operator is granted was used:", summary)
	}
	// A full run: every metric an alert or the dashboard reads must have
	// been scraped from daytwo (checked even after a failed suite: it
	// says something of its own).
	if os.Getenv("DAYTWO_E2E_AUDIT_LOG") != "" && prometheus != nil {
		summary, err := checkMetricsExist(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: monitoring check:", summary+":", err)
			return 1
		}
		fmt.Println("e2e: every metric the alerts and the dashboard read was scraped:", summary)
	}
	return code
}
