//go:build e2e

package framework

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

var rbacDenied = regexp.MustCompile(`forbidden: User \\?"[^"\\]+\\?" cannot [a-z]+ resource`)

const (
	// OperatorNamespace is where config/default installs the operator.
	OperatorNamespace = "daytwo-system"
	operatorSelector  = "app.kubernetes.io/name=daytwo,app.kubernetes.io/component=operator"
	// PauseImage is the smallest image the node has; it only sleeps.
	PauseImage = "registry.k8s.io/pause:3.10.1"
)

// AllowOperatorRestarts accepts the operator's restarts so far: a suite
// that stopped the API server made it exit (controller-runtime's leader
// election gives up when it cannot renew), as it should.
func (c *Cluster) AllowOperatorRestarts(t *testing.T) {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(OperatorNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: operatorSelector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > c.operatorRestarts {
				t.Logf("the operator's container %s restarted %d times (the API server stopped)", s.Name, s.RestartCount)
				c.operatorRestarts = s.RestartCount
			}
		}
	}
}

// CheckOperator returns an error unless the operator survived the suites:
// running and healthy, never restarted, and with no RBAC refusal or panic in
// its log. In kwok mode the operator is the local process p; in real mode it
// is the pod config/default deployed.
func (c *Cluster) CheckOperator(ctx context.Context, p *Process) error {
	var log string
	if c.Mode == ModeKwok {
		if !p.Healthy() {
			return fmt.Errorf("operator process is not healthy; log:\n%s", p.Log())
		}
		log = p.Log()
	} else {
		// A suite may have killed the operator pod: wait for its replacement
		// to be the only one.
		var pods *corev1.PodList
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			pods, err = c.Kube.CoreV1().Pods(OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: operatorSelector})
			return err == nil && len(pods.Items) == 1, nil
		})
		if err != nil {
			return fmt.Errorf("want one operator pod, found %d", len(pods.Items))
		}
		pod := pods.Items[0]
		for _, s := range pod.Status.ContainerStatuses {
			if !s.Ready || s.RestartCount > c.operatorRestarts {
				return fmt.Errorf("operator container %s ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
			}
		}
		raw, err := c.Kube.CoreV1().Pods(OperatorNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("failed to read the operator log: %w", err)
		}
		log = string(raw)
	}
	var errs []error
	// An RBAC refusal names the user ("... is forbidden: User \"system:serviceaccount:...\" cannot list ...");
	// writes into a terminating namespace are also "forbidden", but are not RBAC.
	if rbacDenied.MatchString(log) {
		errs = append(errs, fmt.Errorf("operator log contains an RBAC refusal: %s", rbacDenied.FindString(log)))
	}
	if strings.Contains(strings.ToLower(log), "panic") {
		errs = append(errs, fmt.Errorf("operator log contains a panic"))
	}
	found, summary := ScanOperatorLog(log)
	for _, f := range found {
		errs = append(errs, fmt.Errorf("secret leaked: %s", f))
	}
	fmt.Println("e2e: secrets scan:", summary)
	if len(errs) > 0 {
		return fmt.Errorf("%w; log:\n%s", errors.Join(errs...), log)
	}
	return nil
}

// OperatorReady says one operator pod runs, every container ready.
func (c *Cluster) OperatorReady(ctx context.Context) bool {
	pods, err := c.Kube.CoreV1().Pods(OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: operatorSelector})
	if err != nil || len(pods.Items) != 1 {
		return false
	}
	for _, s := range pods.Items[0].Status.ContainerStatuses {
		if !s.Ready {
			return false
		}
	}
	return len(pods.Items[0].Status.ContainerStatuses) > 0
}
