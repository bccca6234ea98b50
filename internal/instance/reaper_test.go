package instance_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// As a container's PID 1 the instance manager inherits every orphan in the
// pod. Here postgres runs shells (COPY ... FROM PROGRAM, as an archive_command
// might) that leave a background process behind; when each ends it must be
// reaped, not left a zombie, and SIGTERM still stops everything cleanly.
func TestReapsOrphansAsPID1(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("a new PID namespace needs root; CI runs as root")
	}
	in := newInstance(t)
	in.pidNamespace = true
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	pid1 := in.cmd.Process.Pid

	const orphans = 5
	for i := range orphans {
		// FROM, not TO: the shell exits at once, and writing to it would
		// race its exit (a broken pipe).
		sql := fmt.Sprintf("CREATE TEMP TABLE t (x text); COPY t FROM PROGRAM 'sleep 0.%d </dev/null >/dev/null 2>&1 &'", 3+i)
		in.superuser(sql)
	}
	// The shells have exited, so the sleeps are orphans now, and the kernel
	// gave them to PID 1 of the namespace.
	adopted := 0
	for _, p := range procs() {
		if p.ppid == pid1 && p.comm == "sleep" {
			adopted++
		}
	}
	if adopted == 0 {
		t.Fatal("no orphaned sleep was re-parented to the namespace's PID 1; the test proves nothing")
	}
	t.Logf("%d orphans adopted by PID 1", adopted)

	zombies := func() []int {
		var out []int
		all := procs()
		for _, pid := range descendants(pid1, "") {
			if all[pid].state == "Z" {
				out = append(out, pid)
			}
		}
		return out
	}
	time.Sleep(time.Second) // every sleep has ended
	eventually(t, 5*time.Second, func() bool { return len(zombies()) == 0 }, "no zombies below PID 1")

	// SIGTERM goes to PID 1, which passes it on: postgres stops fast and the
	// exit code is the manager's (0), not a signal's.
	running := descendants(pid1, "")
	if took := in.stop(); took > 20*time.Second {
		t.Fatalf("shutdown through PID 1 took %s", took)
	}
	eventually(t, 10*time.Second, func() bool {
		for _, pid := range running {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
				return false
			}
		}
		return true
	}, fmt.Sprintf("the %d processes below PID 1 gone", len(running)))
}
