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
	for _, pid := range childrenOf(postmaster) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(postmaster, syscall.SIGKILL)
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) >= 2 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
