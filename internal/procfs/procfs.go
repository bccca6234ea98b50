// Package procfs reads the processes of Linux's /proc.
package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stat is what /proc/PID/stat says of a process: its command and the
// fields after it, from the state (field 3 of stat(5)) on.
type Stat struct {
	PID    int
	Comm   string
	Fields []string
}

// Field returns field n as stat(5) numbers them (3 is the state, 4 the
// parent, 14 and 15 the user and system clock ticks), or "".
func (s Stat) Field(n int) string {
	if i := n - 3; i >= 0 && i < len(s.Fields) {
		return s.Fields[i]
	}
	return ""
}

// Stats reads every process's stat; a process that ends meanwhile is left out.
func Stats() []Stat {
	var out []Stat
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		out = append(out, Stat{PID: pid, Comm: s[open+1 : end], Fields: strings.Fields(s[end+1:])})
	}
	return out
}
