//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// realNodeCluster is the real node's kwokctl cluster (NAME in
// hack/realnode.sh). The kwok e2e's cluster runs its own control plane on
// this machine too, so a component is matched by its cluster's directory.
const realNodeCluster = "daytwo-rn"

// controlPlanePIDs are the processes of one of the real node's control-plane
// components (they run on this machine).
func controlPlanePIDs(t *testing.T, comp string) []string {
	t.Helper()
	out, _ := exec.Command("pgrep", "-f", "--", "/"+realNodeCluster+"/bin/"+comp+" ").Output() // exit 1: none
	return strings.Fields(string(out))
}

// The real node's control plane is supervised as a real cluster's is:
// kube-controller-manager and kube-scheduler that exit (both do when they
// lose their leader election, as during an API-server pause) start again
// (hack/realnode.sh's supervisor), and the node goes on creating pods.
func TestRealNodeControlPlaneIsSupervised(t *testing.T) {
	requireRealNode(t)
	comps := []string{"kube-controller-manager", "kube-scheduler"}
	old := map[string][]string{}
	for _, comp := range comps {
		old[comp] = controlPlanePIDs(t, comp)
		if len(old[comp]) != 1 {
			t.Fatalf("want one %s process, found %v", comp, old[comp])
		}
		for _, pid := range old[comp] {
			var p int
			if _, err := fmt.Sscan(pid, &p); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	killed := time.Now()
	framework.Eventually(t, time.Minute, "both components running again", func(context.Context) (bool, error) {
		for _, comp := range comps {
			now := controlPlanePIDs(t, comp)
			if len(now) != 1 || slices.Equal(now, old[comp]) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("kube-controller-manager and kube-scheduler running again %s after they were killed", time.Since(killed).Round(100*time.Millisecond))
	// A Deployment needs both: the controller manager makes its pod, the
	// scheduler places it.
	ns := cluster.Namespace(t)
	serve(t, ns, "after-restart", 1, 8080, corev1.PodSpec{
		SecurityContext: framework.RestrictedPod(),
		Containers: []corev1.Container{{Name: "pause", Image: framework.PauseImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: framework.RestrictedContainer()}},
	})
}

// apiServerOutage is how long TestDatabasesWriteThroughAnAPIServerOutage
// stops the API server: E2E_APISERVER_OUTAGE (a Go duration; the issue's
// ten minutes is `E2E_APISERVER_OUTAGE=10m`), 60 s by default.
func apiServerOutage(t *testing.T) time.Duration {
	d := 60 * time.Second
	if v := os.Getenv("E2E_APISERVER_OUTAGE"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("E2E_APISERVER_OUTAGE=%q: %v", v, err)
		}
	}
	return d
}

// The whole control plane's API server stops (SIGSTOP: a hung server, as
// in an etcd blip or a stuck upgrade) with a 1-instance and a 3-instance
// Database writing through -rw: neither loses more than a second of writes,
// no failover happens, and once the API server is back the node makes pods
// again (its controller manager and scheduler, which exit when they lose
// their leader election meanwhile, are started again).
func TestDatabasesWriteThroughAnAPIServerOutage(t *testing.T) {
	requireRealNode(t)
	ns := cluster.Namespace(t)
	sizes := map[string]int32{"solo": 1, "trio": 3}
	for db, n := range sizes {
		createDatabase(t, ns, db, func(d *v1alpha1.Database) { d.Spec.Instances = ptr.To(n) })
	}
	writers, primaries := map[string]*framework.Writer{}, map[string]string{}
	for db, n := range sizes {
		primaries[db] = waitDatabase(t, ns, db, 5*time.Minute, "whole", framework.Whole(n)).Status.Primary
		cluster.RunPod(t, framework.PSQLPod(ns, db+"-client", postgresImage, db))
		rw := "host=" + db + "-rw." + ns + ".svc.cluster.local user=app dbname=app connect_timeout=2"
		writers[db] = cluster.StartWriter(t, ns, db+"-client", "client", rw, "acks")
	}
	for db, w := range writers {
		framework.Eventually(t, time.Minute, db+": the writer writing", func(context.Context) (bool, error) {
			return len(w.Read(t).Acked) > 0, nil
		})
	}
	pids := controlPlanePIDs(t, "kube-apiserver")
	if len(pids) != 1 {
		t.Fatalf("want one kube-apiserver process, found %v", pids)
	}
	var pid int
	if _, err := fmt.Sscan(pids[0], &pid); err != nil {
		t.Fatal(err)
	}
	outage := apiServerOutage(t)
	resume := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("kube-apiserver stopped for %s", outage)
	time.Sleep(outage) // the fault itself, not a wait for a result
	resume()
	resumed := time.Now()
	framework.Eventually(t, 2*time.Minute, "the API server answering again", func(ctx context.Context) (bool, error) {
		return cluster.Client.List(ctx, &corev1.NamespaceList{}) == nil, nil
	})
	t.Logf("kube-apiserver answers %s after it resumed", time.Since(resumed).Round(100*time.Millisecond))
	for db, w := range writers {
		framework.Eventually(t, time.Minute, db+": writes after the outage", func(context.Context) (bool, error) {
			return w.Read(t).WrittenSince(time.Now().Add(-time.Second)), nil
		})
		res := w.Stop(t)
		gap, at := res.GapAround(stopped, time.Now())
		t.Logf("%s (%d instances): %d writes acknowledged; longest gap %s at %s (the outage %s to %s)", db, sizes[db], len(res.Acked),
			gap.Round(10*time.Millisecond), at.Format(time.StampMilli), stopped.Format(time.StampMilli), resumed.Format(time.StampMilli))
		if gap > time.Second {
			t.Errorf("%s: writes through -rw stopped for %s around an API-server outage of %s", db, gap.Round(10*time.Millisecond), outage)
		}
		d := waitDatabase(t, ns, db, time.Minute, "Ready", func(d *v1alpha1.Database) bool { return d.Status.Ready })
		if d.Status.Primary != primaries[db] || (d.Status.LastFailover != nil && d.Status.LastFailover.DetectedTime.After(stopped)) {
			t.Errorf("%s: the primary moved from %s to %s (last failover %+v) though none had to", db, primaries[db], d.Status.Primary, d.Status.LastFailover)
		}
	}
	if cluster.Mode == framework.ModeReal {
		framework.Eventually(t, 2*time.Minute, "the operator running again", func(ctx context.Context) (bool, error) {
			return cluster.OperatorReady(ctx), nil
		})
		cluster.AllowOperatorRestarts(t)
	}
	// The node makes pods again: the controller manager and the
	// scheduler, if they exited, run again.
	serve(t, ns, "after-outage", 1, 8080, corev1.PodSpec{
		SecurityContext: framework.RestrictedPod(),
		Containers: []corev1.Container{{Name: "pause", Image: framework.PauseImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: framework.RestrictedContainer()}},
	})
}
