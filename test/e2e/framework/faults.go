//go:build e2e

package framework

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Faults for the real node, where the test runs on the node itself: a
// frozen container (every process stopped at once, as on a hung server or
// a dead disk) and a killed process.

// containerID is the runtime's id of container in pod.
func (c *Cluster) containerID(t *testing.T, ns, pod, container string) string {
	t.Helper()
	p := &corev1.Pod{}
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.ContainerID != "" {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id
		}
	}
	t.Fatalf("container %s of %s/%s has no id", container, ns, pod)
	return ""
}

// Freeze stops every process of a container at once with the cgroup
// freezer and returns the function that thaws it. The container must run
// on this machine (the real node).
func (c *Cluster) Freeze(t *testing.T, ns, pod, container string) (thaw func()) {
	t.Helper()
	id := c.containerID(t, ns, pod, container)
	// cgroup v1 (the real node's kubelet runs on it here) or v2.
	for _, f := range []struct{ root, file, frozen, thawed string }{
		{"/sys/fs/cgroup/freezer", "freezer.state", "FROZEN", "THAWED"},
		{"/sys/fs/cgroup", "cgroup.freeze", "1", "0"},
	} {
		dir, err := findDir(f.root, id)
		if err != nil {
			continue
		}
		path := filepath.Join(dir, f.file)
		if err := os.WriteFile(path, []byte(f.frozen), 0o644); err != nil {
			t.Fatalf("freeze %s: %v", pod, err)
		}
		// The write only starts freezing: make sure it took, and that it
		// took on the processes of the container, before anyone relies on it.
		tasks, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(strings.Fields(string(tasks))) == 0 {
			t.Fatalf("freeze %s: cgroup %s holds no process (%v)", pod, dir, err)
		}
		if f.file == "freezer.state" {
			deadline := time.Now().Add(5 * time.Second)
			for {
				state, _ := os.ReadFile(path)
				if strings.TrimSpace(string(state)) == f.frozen {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("freeze %s: %s still %q after 5s", pod, dir, strings.TrimSpace(string(state)))
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Logf("froze %s: %d processes in %s", pod, len(strings.Fields(string(tasks))), dir)
		// Idempotent, so it can also be a cleanup; a container already gone is thawed.
		return func() {
			if err := os.WriteFile(path, []byte(f.thawed), 0o644); err != nil && !os.IsNotExist(err) {
				t.Errorf("thaw %s: %v", pod, err)
			}
		}
	}
	t.Fatalf("no cgroup of container %s found to freeze", id)
	return nil
}

// StopProcesses stops (SIGSTOP) every process of a container whose name
// is comm, and returns the function that resumes them (SIGCONT): a hung
// server under a live instance manager. The container must run on this
// machine (the real node).
func (c *Cluster) StopProcesses(t *testing.T, ns, pod, container, comm string) (resume func()) {
	t.Helper()
	id := c.containerID(t, ns, pod, container)
	var pids []int
	for _, root := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer", "/sys/fs/cgroup"} {
		dir, err := findDir(root, id)
		if err != nil {
			continue
		}
		procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(procs)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if name, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(name)) == comm {
				pids = append(pids, pid)
			}
		}
		break
	}
	if len(pids) == 0 {
		t.Fatalf("no %s process in container %s of %s", comm, container, pod)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	t.Logf("stopped %d %s processes of %s", len(pids), comm, pod)
	// Idempotent, so it can also be a cleanup.
	return func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

var errFound = errors.New("found")

// findDir finds the directory named name below root.
func findDir(root, name string) (string, error) {
	var found string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Contains(d.Name(), name) {
			found = path
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return found, nil
	}
	return "", fmt.Errorf("no directory %s below %s", name, root)
}

// TagImage gives an image loaded on the real node another name.
func (c *Cluster) TagImage(t *testing.T, src, dst string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "realnode.sh"), "tag", src, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("tag %s as %s: %v: %s", src, dst, err, out)
	}
}

// KillPostgres sends SIGKILL to the postmaster of the PostgreSQL pod, as the
// kernel's OOM killer would.
func (c *Cluster) KillPostgres(t *testing.T, ns, pod string) {
	t.Helper()
	c.ExecOK(t, ns, pod, "postgres", "sh", "-c", `kill -KILL "$(head -n 1 "$PGDATA/postmaster.pid")"`)
}
