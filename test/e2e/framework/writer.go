//go:build e2e

package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Writer is an application as a failover sees it: a program in a client pod
// (e2e-client writer) that writes one row per attempt to a table through a
// Service, each attempt a new connection capped at 0.5 s, ten attempts a
// second. It records every acknowledged id with the time of its
// acknowledgement.
type Writer struct {
	c                  *Cluster
	ns, pod, container string
	started            time.Time
}

// WriterResult is what a Writer recorded.
type WriterResult struct {
	// Acked holds the acknowledged ids in order, Times when each was
	// acknowledged and Starts when each was begun.
	Acked  []int
	Times  []time.Time
	Starts []time.Time
	// Attempts counts every write tried, Failed the ones not acknowledged.
	Attempts, Failed int
	// Failures are the failed attempts, in order.
	Failures   []Failure
	Start, End time.Time
}

// StartWriter creates table (id int) through conninfo and starts writing to it.
func (c *Cluster) StartWriter(t *testing.T, ns, pod, container, conninfo, table string) *Writer {
	return c.startWriter(t, ns, pod, container, conninfo, table, "writer")
}

// StartPooledWriter is StartWriter for a client of a pool: one connection
// kept, each write waited for up to 5 s (a paused pool holds it).
func (c *Cluster) StartPooledWriter(t *testing.T, ns, pod, container, conninfo, table string) *Writer {
	return c.startWriter(t, ns, pod, container, conninfo, table, "pooled-writer")
}

func (c *Cluster) startWriter(t *testing.T, ns, pod, container, conninfo, table, mode string) *Writer {
	t.Helper()
	// A Service made a moment ago may not route yet (its endpoints wait on
	// the controller manager, which a test may just have restarted): the
	// table is made once it does.
	Eventually(t, time.Minute, "the writer's table made through "+conninfo, func(ctx context.Context) (bool, error) {
		_, _, err := c.Exec(ctx, ns, pod, container, "psql", conninfo, "-v", "ON_ERROR_STOP=1", "-qtAc",
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (id int PRIMARY KEY)", table))
		return err == nil, nil
	})
	bin, err := os.Open(writerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bin.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, errOut, err := c.ExecStdin(ctx, ns, pod, container, bin, "sh", "-c", "cat > /tmp/e2e-client && chmod 0755 /tmp/e2e-client"); err != nil {
		t.Fatalf("copying the writer into %s/%s: %v\nstdout: %s\nstderr: %s", ns, pod, err, out, errOut)
	}
	// The program's files (test/e2e/client/writer.go): it writes while
	// /tmp/writer-run exists, and logs to /tmp/writer.log.
	c.ExecOK(t, ns, pod, container, "sh", "-c",
		`rm -f /tmp/writer.log; touch /tmp/writer-run; nohup /tmp/e2e-client "$2" "$0" "$1" </dev/null >/tmp/writer.err 2>&1 &`,
		conninfo, table, mode)
	return &Writer{c: c, ns: ns, pod: pod, container: container, started: time.Now()}
}

// writerBinary builds test/e2e/client, static, once per test process: the
// writer runs in a client pod of whatever image the test needs (psql's,
// for reading the writes back).
func writerBinary(t *testing.T) string {
	t.Helper()
	writerBuild.Do(func() {
		dir, err := os.MkdirTemp("", "e2e-writer") //nolint:usetesting // built once for every suite, not one test
		if err != nil {
			writerBuild.err = err
			return
		}
		writerBuild.path = filepath.Join(dir, "e2e-client")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", writerBuild.path, "./test/e2e/client")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			writerBuild.err = fmt.Errorf("building the writer: %w\n%s", err, out)
		}
	})
	if writerBuild.err != nil {
		t.Fatal(writerBuild.err)
	}
	return writerBuild.path
}

var writerBuild struct {
	sync.Once
	path string
	err  error
}

// Stop ends the loop, waits for its last attempt and returns what it recorded.
func (w *Writer) Stop(t *testing.T) WriterResult {
	t.Helper()
	w.c.ExecOK(t, w.ns, w.pod, w.container, "rm", "-f", "/tmp/writer-run")
	var log string
	Eventually(t, 30*time.Second, "the writer to stop", func(ctx context.Context) (bool, error) {
		out, _, err := w.c.Exec(ctx, w.ns, w.pod, w.container, "cat", "/tmp/writer.log")
		log = out
		return err == nil && strings.HasSuffix(strings.TrimSpace(out), "done"), nil
	})
	r := w.parse(t, log)
	if len(r.Acked) == 0 {
		t.Fatalf("the writer had no write acknowledged in %d attempts:\n%s", r.Attempts, log)
	}
	return r
}

// Read returns what the writer recorded so far; it goes on writing.
func (w *Writer) Read(t *testing.T) WriterResult {
	t.Helper()
	return w.parse(t, w.c.ExecOK(t, w.ns, w.pod, w.container, "cat", "/tmp/writer.log"))
}

func (w *Writer) parse(t *testing.T, log string) WriterResult {
	t.Helper()
	r := WriterResult{Start: w.started, End: time.Now()}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		id, err1 := strconv.Atoi(f[1])
		sec, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("writer log line %q", line)
		}
		r.Attempts++
		if f[0] != "A" {
			r.Failed++
			fl := Failure{End: time.Unix(0, int64(sec*1e9))}
			if len(f) > 3 {
				if s, err := strconv.ParseFloat(f[3], 64); err == nil {
					fl.Start = time.Unix(0, int64(s*1e9))
				}
				fl.Why = strings.Join(f[4:], " ")
			}
			r.Failures = append(r.Failures, fl)
			continue
		}
		r.Acked = append(r.Acked, id)
		end := time.Unix(0, int64(sec*1e9))
		r.Times = append(r.Times, end)
		start := end
		if len(f) > 3 {
			if s, err := strconv.ParseFloat(f[3], 64); err == nil {
				start = time.Unix(0, int64(s*1e9))
			}
		}
		r.Starts = append(r.Starts, start)
	}
	return r
}

// Latencies are how long the acknowledged writes begun in [from, to]
// took.
func (r WriterResult) Latencies(from, to time.Time) []time.Duration {
	var out []time.Duration
	for i, s := range r.Starts {
		if !s.Before(from) && !s.After(to) {
			out = append(out, r.Times[i].Sub(s))
		}
	}
	return out
}

// FailedIn counts the failed attempts that ended in [from, to].
func (r WriterResult) FailedIn(from, to time.Time) int {
	n := 0
	for _, f := range r.Failures {
		if !f.End.Before(from) && !f.End.After(to) {
			n++
		}
	}
	return n
}

// Failure is one write attempt that was not acknowledged.
type Failure struct {
	Start, End time.Time
	Why        string
}

// FailuresIn describes the failed attempts that ended in [from, to], one
// per line with its start and length: what a gap was made of.
func (r WriterResult) FailuresIn(from, to time.Time) string {
	var b strings.Builder
	for _, f := range r.Failures {
		if f.End.Before(from) || f.End.After(to) {
			continue
		}
		fmt.Fprintf(&b, "\n  %s +%s: %s", f.Start.UTC().Format("15:04:05.000"), f.End.Sub(f.Start).Round(10*time.Millisecond), f.Why)
	}
	return b.String()
}

// GapAround is the longest stretch without an acknowledged write that
// overlaps [from, to], and when it began: what a fault at from cost, if
// the writer is back by to.
func (r WriterResult) GapAround(from, to time.Time) (time.Duration, time.Time) {
	var gap time.Duration
	var began time.Time
	prev := r.Start
	for _, t := range append(slices.Clone(r.Times), r.End) {
		if !t.Before(from) && !prev.After(to) && t.Sub(prev) > gap {
			gap, began = t.Sub(prev), prev
		}
		prev = t
	}
	return gap, began
}

// WrittenSince is true once a write was acknowledged after at.
func (r WriterResult) WrittenSince(at time.Time) bool {
	return len(r.Times) > 0 && r.Times[len(r.Times)-1].After(at)
}

// LongestGap is the longest stretch without an acknowledged write, and when it began.
func (r WriterResult) LongestGap() (time.Duration, time.Time) {
	var gap time.Duration
	var at time.Time
	prev := r.Start
	for _, t := range append(slices.Clone(r.Times), r.End) {
		if d := t.Sub(prev); d > gap {
			gap, at = d, prev
		}
		prev = t
	}
	return gap, at
}

// Lost lists the acknowledged ids missing from present.
func (r WriterResult) Lost(present []int) []int {
	have := map[int]bool{}
	for _, id := range present {
		have[id] = true
	}
	var lost []int
	for _, id := range r.Acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	return lost
}

// String summarises the run.
func (r WriterResult) String() string {
	gap, _ := r.LongestGap()
	return fmt.Sprintf("%d writes acknowledged of %d tried, longest gap %s", len(r.Acked), r.Attempts, gap.Round(10*time.Millisecond))
}

// PSQLPod is a client pod with psql (image) and the password of the
// Database named db, which verifies the server as the credentials Secret
// says to: TLS with sslmode=verify-full against the Secret's ca.crt.
func PSQLPod(ns, name, image, db string) *corev1.Pod {
	secret := db + "-credentials"
	pod := ClientPod(ns, name, image, corev1.EnvVar{Name: "PGPASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "password"}}},
		corev1.EnvVar{Name: "PGSSLMODE", Value: "verify-full"}, corev1.EnvVar{Name: "PGSSLROOTCERT", Value: "/etc/daytwo/database/ca.crt"})
	pod.Spec.SecurityContext.RunAsUser = ptrTo[int64](999)
	pod.Spec.Volumes = []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ca", MountPath: "/etc/daytwo/database", ReadOnly: true}}
	return pod
}

// ReadIDs returns the ids in table, read through conninfo.
func (c *Cluster) ReadIDs(t *testing.T, ns, pod, container, conninfo, table string) []int {
	t.Helper()
	out := c.ExecOK(t, ns, pod, container, "psql", conninfo, "-v", "ON_ERROR_STOP=1", "-qtAc", "SELECT id FROM "+table)
	var ids []int
	for _, f := range strings.Fields(out) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("id %q in %s", f, table)
		}
		ids = append(ids, id)
	}
	return ids
}
