//go:build e2e

package framework

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// Process is the operator run as a local process against the cluster, which
// is how the kwok cluster hosts it: kwok nodes cannot run its pod.
type Process struct {
	cmd       *exec.Cmd
	log       *testpg.SyncBuffer
	probeAddr string
	exited    chan struct{}
}

// StartOperatorProcess runs DAYTWO_BIN operator with the cluster's KUBECONFIG.
func StartOperatorProcess() (*Process, error) {
	bin := os.Getenv("DAYTWO_BIN")
	if bin == "" {
		return nil, fmt.Errorf("DAYTWO_BIN is not set: run the suites through `make test-e2e`")
	}
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &Process{log: &testpg.SyncBuffer{}, probeAddr: probe, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "operator", "--metrics-bind-address=0", "--health-probe-bind-address="+probe)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if p.Healthy() {
			return p, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.Stop()
	return nil, fmt.Errorf("operator never became ready:\n%s", p.Log())
}

// Healthy reports whether the process runs and answers /readyz.
func (p *Process) Healthy() bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	resp, err := http.Get("http://" + p.probeAddr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Log returns everything the operator printed so far.
func (p *Process) Log() string { return p.log.String() }

// Stop terminates the operator and waits for it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
