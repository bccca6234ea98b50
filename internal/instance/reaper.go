package instance

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// initChildEnv marks the instance manager that an init process started, so
// it does not start another.
const initChildEnv = "DAYTWO_INIT_CHILD"

// NeedsInit reports whether this process is PID 1 of its PID namespace (the
// container's first process) and so must reap the orphans the kernel hands
// it: a postgres child whose parent died, the shell of an archive_command or
// a COPY ... FROM PROGRAM. Without reaping they stay zombies and, over weeks,
// use up the pod's PID limit.
func NeedsInit() bool {
	return os.Getpid() == 1 && os.Getenv(initChildEnv) == ""
}

// RunInit is a minimal init, in the manner of tini: it starts this binary
// again with the same arguments as its only child, forwards every signal a
// container receives to it, reaps every process that ends below it, and
// returns the exit code of the child (128+n when a signal n ended it). The
// instance manager itself never calls wait on processes it did not start, so
// the two never steal an exit status from each other.
func RunInit() (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("failed to find this binary: %w", err)
	}
	forward := make(chan os.Signal, 8)
	signal.Notify(forward, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(forward)

	child := exec.Command(self, os.Args[1:]...) //nolint:gosec // PID 1 runs its own binary again, with its own arguments
	child.Env = append(os.Environ(), initChildEnv+"=1")
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		return 1, fmt.Errorf("failed to start the instance manager: %w", err)
	}
	pid := child.Process.Pid
	go func() {
		for sig := range forward {
			// The child may be gone already; then there is no one to tell.
			_ = syscall.Kill(pid, sig.(syscall.Signal))
		}
	}()
	return reap(pid)
}

// reap waits for any child until pid ends, and returns pid's exit code.
func reap(pid int) (int, error) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 1, fmt.Errorf("failed to wait for the instance manager: %w", err)
		}
		if got != pid {
			continue // an orphan, now reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), nil
		case ws.Signaled():
			return 128 + int(ws.Signal()), nil
		}
	}
}
