package instance

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// process is what /proc/<pid>/stat says of a process.
type process struct {
	PPID  int
	Comm  string
	State string
}

// processes reads every process from /proc.
func processes() map[int]process {
	out := map[int]process{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		out[pid] = process{PPID: ppid, Comm: s[open+1 : end], State: fields[0]}
	}
	return out
}
