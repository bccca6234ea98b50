//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
