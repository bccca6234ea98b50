// Command webapp is the WebApp benchmark (`make bench-webapp`). Against the
// kwok cluster named by KUBECONFIG, with the operator binary DAYTWO_BIN run as
// in production, it measures:
//
//   - convergence: N WebApps created until each has its Deployment and Service
//     and a current status, against a bare client creating the same
//     Deployments and Services with the same parallelism (the floor);
//   - no-op cost: the writes a restarted operator sends while it resyncs all N;
//   - a second floor, the one the goal is set against (BENCH_CRD_FLOOR=0
//     skips it): a bare client that also creates each WebApp and writes
//     its status, the least any client of a WebApp kind asks of the API
//     server;
//   - a third, the protocol floor (BENCH_PROTOCOL_FLOOR=0 skips it): as the
//     second, with what a safe operator must add (its reads before each
//     apply, server-side applies, its informers' watches), and nothing of
//     daytwo's logic (floor.go);
//   - memory: operator heap before and after N WebApps, per WebApp;
//   - latency: spec changes at a fixed rate, from write to status observed.
//
// BENCH_ROUNDS repeats the two floors with the WebApp kind and the
// operator's run (rounds.go). The last line, machine-readable, reports
// their medians. It is a benchmark, not a test: it prints figures and
// ratios and fails only when something does not work at all.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/daytwo-dev/daytwo/test/bench/kwokop"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "bench-webapp:", err)
		os.Exit(1)
	}
}

type config struct {
	n, parallel int
	rate        int
	duration    time.Duration
	bin         string
	crdFloor    bool
	// protocolFloor runs the protocol floor too (floor.go), with crdFloor.
	protocolFloor bool
	// rounds is how many times the floors and the operator each run,
	// alternating, for the medians the BENCH line reports (BENCH_ROUNDS).
	rounds int
	// profileSeconds is the length of the CPU profiles BENCH_CPU_PROFILE
	// asks for, from the start of each floor's run and the operator's.
	profileSeconds int
}

func run(ctx context.Context) error {
	cfg := config{
		n:              kwokop.EnvInt("BENCH_N", 1000),
		parallel:       kwokop.EnvInt("BENCH_PARALLEL", 16),
		rate:           kwokop.EnvInt("BENCH_RATE", 20),
		duration:       time.Duration(kwokop.EnvInt("BENCH_LATENCY_SECONDS", 60)) * time.Second,
		bin:            os.Getenv("DAYTWO_BIN"),
		crdFloor:       os.Getenv("BENCH_CRD_FLOOR") != "0",
		protocolFloor:  os.Getenv("BENCH_PROTOCOL_FLOOR") != "0",
		profileSeconds: kwokop.EnvInt("BENCH_PROFILE_SECONDS", 20),
		rounds:         kwokop.EnvInt("BENCH_ROUNDS", 1),
	}
	b, err := newBench(cfg)
	if err != nil {
		return err
	}
	return b.run(ctx)
}
