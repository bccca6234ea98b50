// Package operatorha tests the operator as two replicas with leader
// election, as config/default and the chart run it (--leader-elect): the
// daytwo binary twice, as processes against a real API server.
package operatorha_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

const (
	apps = 200
	// leaseName is the operator's LeaderElectionID.
	leaseName = "daytwo.daytwo.dev"
)

// The leader is killed (SIGKILL: no release of the Lease) while 200
// WebApps are being made, and every one of them changes its image right
// after, before the standby can lead (the Lease runs 4 s; the log says
// whether the changes beat it). The standby takes over once the Lease
// expires, and then every WebApp has exactly one Deployment and one
// Service, controlled by it, with the image of its latest spec.
func TestStandbyTakesOverFromAKilledLeaderDuringChurn(t *testing.T) {
	env, err := testenv.StartCRDs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dir := t.TempDir()
	bin := filepath.Join(dir, "daytwo")
	build := exec.Command("go", "build", "-o", bin, "./cmd/daytwo")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	env.WriteKubeconfig(t, kubeconfig)
	ns := env.Namespace(t)
	ctx := t.Context()
	c := env.Client

	start := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "operator", "--leader-elect", "--leader-election-namespace", ns,
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--webhook-port=0", "--instance-image=localhost/daytwo:dev",
			// Shorter than the defaults (15 s, 10 s, 2 s), for the test's time.
			"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		logs, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(logs.Name())
				t.Logf("operator %s's log (the end):\n%s", name, tail(b, 4000))
			}
		})
		return cmd
	}
	holder := func() string {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, l); err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}

	leader := start("first")
	var first string
	testenv.Eventually(t, "the first operator leads", func() (bool, error) { first = holder(); return first != "", nil })
	start("second")

	// Churn: 200 WebApps made from two goroutines.
	var wg sync.WaitGroup
	errs := make(chan error, apps)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < apps; i += 2 {
				app := &v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%03d", i)},
					Spec: v1alpha1.WebAppSpec{Image: "shop:v1", Port: 8080, Replicas: ptr.To[int32](1)}}
				if err := c.Create(context.Background(), app); err != nil {
					errs <- err
				}
			}
		}()
	}
	// The leader dies with work half done.
	testenv.Eventually(t, "a quarter of the Deployments", func() (bool, error) { return count(ctx, t, c, ns) >= apps/4, nil })
	if err := leader.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = leader.Wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating a WebApp: %v", err)
	}
	t.Logf("killed the leader with %d of %d Deployments made", count(ctx, t, c, ns), apps)
	// Every WebApp changes while no replica leads.
	for i := range apps {
		app := &v1alpha1.WebApp{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("app-%03d", i)}, app); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(app.DeepCopy())
		app.Spec.Image = "shop:v2"
		if err := c.Patch(ctx, app, patch); err != nil {
			t.Fatal(err)
		}
	}

	changed := time.Now()
	var second string
	eventually(t, time.Minute, "the standby leads", func() (bool, error) {
		second = holder()
		return second != "" && second != first, nil
	})
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, l); err != nil {
		t.Fatal(err)
	}
	acquired := ptr.Deref(l.Spec.AcquireTime, metav1.MicroTime{}).Time
	t.Logf("the standby leads %s after the kill (it acquired the Lease %s after the last change)",
		time.Since(killed).Round(100*time.Millisecond), acquired.Sub(changed).Round(100*time.Millisecond))
	eventually(t, time.Minute, "every WebApp converged on shop:v2", func() (bool, error) {
		deps := &appsv1.DeploymentList{}
		if err := c.List(ctx, deps, client.InNamespace(ns)); err != nil {
			return false, err
		}
		n := 0
		for _, d := range deps.Items {
			if d.Spec.Template.Spec.Containers[0].Image == "shop:v2" {
				n++
			}
		}
		return n == apps, nil
	})
	t.Logf("every WebApp converged %s after the kill", time.Since(killed).Round(100*time.Millisecond))

	// Nothing made twice, nothing lost: one Deployment and one Service
	// per WebApp, each controlled by it, and every status observed.
	list := &v1alpha1.WebAppList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, a := range list.Items {
		uids[string(a.UID)] = true
	}
	for _, l := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, _ := metaList(l)
		if len(items) != apps {
			t.Errorf("%d %T items, want %d", len(items), l, apps)
		}
		for _, o := range items {
			if owner := metav1.GetControllerOf(o); owner == nil || !uids[string(owner.UID)] || owner.Name != o.GetName() {
				t.Errorf("%T %s is not controlled by its WebApp", o, o.GetName())
			}
		}
	}
	eventually(t, time.Minute, "every WebApp's status observes its spec", func() (bool, error) {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, a := range list.Items {
			if a.Status.ObservedGeneration != a.Generation {
				return false, nil
			}
		}
		return true, nil
	})
}

// eventually polls cond until it holds, for up to timeout: longer than
// testenv.Eventually waits, for a machine under load.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
}

func count(ctx context.Context, t *testing.T, c client.Client, ns string) int {
	t.Helper()
	deps := &appsv1.DeploymentList{}
	if err := c.List(ctx, deps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(deps.Items)
}

func metaList(l client.ObjectList) ([]client.Object, error) {
	var out []client.Object
	switch l := l.(type) {
	case *appsv1.DeploymentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
