package instance

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/daytwo-dev/daytwo/internal/procfs"
)

// killServer SIGKILLs the postmaster and every process it forked. Each
// PostgreSQL backend runs in a session of its own, so a signal to the
// postmaster's process group misses them, and a backend that is frozen (or
// stuck on a dead disk) would never notice its postmaster died: it could
// still finish a commit, and its shared memory would keep a new postmaster
// from starting. The postmaster is stopped first so it forks no more.
func killServer(postmaster int) {
	_ = syscall.Kill(postmaster, syscall.SIGSTOP)
	for pid, p := range processes() {
		if p.PPID == postmaster {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = syscall.Kill(postmaster, syscall.SIGKILL)
}

// killOrphans SIGKILLs the backends a dead postmaster left behind, before
// a new one starts: they would keep its shared memory attached (so the new
// postmaster refuses to start) and could still write. In a container they
// were handed to the init that started this manager (see RunInit); outside
// one (tests) there is no such parent to look below, and nothing is done.
func killOrphans() {
	if os.Getenv(initChildEnv) == "" {
		return
	}
	init := os.Getppid()
	var left []int
	for pid, p := range processes() {
		if p.PPID == init && p.Comm == "postgres" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			left = append(left, pid)
		}
	}
	for range 50 { // the init reaps them; wait at most 5 s
		alive := false
		for _, pid := range left {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
				alive = true
			}
		}
		if !alive {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// process is what /proc/<pid>/stat says of a process.
type process struct {
	PPID  int
	Comm  string
	State string
}

// processes reads every process from /proc.
func processes() map[int]process {
	out := map[int]process{}
	for _, st := range procfs.Stats() {
		ppid, err := strconv.Atoi(st.Field(4))
		if err != nil {
			continue
		}
		out[st.PID] = process{PPID: ppid, Comm: st.Comm, State: st.Field(3)}
	}
	return out
}
