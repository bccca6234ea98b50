//go:build e2e

package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// OperatorNamespace is where config/default installs the operator.
	OperatorNamespace = "daytwo-system"
	operatorSelector  = "app.kubernetes.io/name=daytwo,app.kubernetes.io/component=operator"
	// PauseImage is the smallest image the node has; it only sleeps.
	PauseImage = "registry.k8s.io/pause:3.10.1"
)

// operatorPod returns the in-cluster operator pod (real mode).
func (c *Cluster) operatorPod(t *testing.T) corev1.Pod {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(OperatorNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: operatorSelector})
	if err != nil {
		t.Fatalf("failed to list operator pods: %v", err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("want one operator pod, found %d", len(pods.Items))
	}
	return pods.Items[0]
}

// OperatorLog returns the in-cluster operator's log (real mode).
func (c *Cluster) OperatorLog(t *testing.T) string {
	t.Helper()
	pod := c.operatorPod(t)
	raw, err := c.Kube.CoreV1().Pods(OperatorNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("failed to read the operator log: %v", err)
	}
	return string(raw)
}

// CheckOperatorPod fails the test unless the operator pod is Ready and never restarted.
func (c *Cluster) CheckOperatorPod(t *testing.T) {
	t.Helper()
	pod := c.operatorPod(t)
	for _, s := range pod.Status.ContainerStatuses {
		if !s.Ready || s.RestartCount != 0 {
			t.Errorf("operator container %s ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
		}
	}
}
