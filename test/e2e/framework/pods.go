//go:build e2e

package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream" //nolint:staticcheck // client-go's remotecommand still returns these errors; k8s.io/streaming is not in the module graph
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
)

// Exec runs cmd in a container and returns its stdout and stderr.
func (c *Cluster) Exec(ctx context.Context, ns, pod, container string, cmd ...string) (string, string, error) {
	return c.ExecStdin(ctx, ns, pod, container, nil, cmd...)
}

// ExecStdin is Exec with stdin (nil: none) as the command's input.
func (c *Cluster) ExecStdin(ctx context.Context, ns, pod, container string, stdin io.Reader, cmd ...string) (string, string, error) {
	req := c.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// ExecOK runs cmd in a container and fails the test when it fails.
func (c *Cluster) ExecOK(t *testing.T, ns, pod, container string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, errOut, err := c.Exec(ctx, ns, pod, container, cmd...)
	if err != nil {
		t.Fatalf("exec %v in %s/%s: %v\nstdout: %s\nstderr: %s", cmd, ns, pod, err, out, errOut)
	}
	return out
}

// RunPod creates pod and waits until it is Running with every container ready.
func (c *Cluster) RunPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if err := c.Client.Create(context.Background(), pod); err != nil {
		t.Fatalf("failed to create pod %s: %v", pod.Name, err)
	}
	c.WaitPodReady(t, pod.Namespace, pod.Name, 2*time.Minute)
	return pod
}

// WaitPodReady waits until the pod's Ready condition is True.
func (c *Cluster) WaitPodReady(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("pod %s/%s Ready", ns, name), func(ctx context.Context) (bool, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// ClientPod runs a long-sleeping pod with image, to exec test clients in.
// It meets the restricted Pod Security Standard.
func ClientPod(ns, name, image string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo[int64](1),
			SecurityContext:               RestrictedPod(),
			Containers: []corev1.Container{{
				Name: "client", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"}, Env: env,
				SecurityContext: RestrictedContainer(),
			}},
		},
	}
}

// RestrictedPod is a pod security context that meets the restricted standard.
func RestrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptrTo[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// RestrictedContainer is a container security context that meets the restricted standard.
func RestrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func ptrTo[T any](v T) *T { return &v }

// RunToCompletion creates a pod with restartPolicy Never, waits for it to end
// and returns its log; the test fails unless the pod Succeeded.
func (c *Cluster) RunToCompletion(t *testing.T, pod *corev1.Pod, timeout time.Duration) string {
	t.Helper()
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := c.Client.Create(context.Background(), pod); err != nil {
		t.Fatalf("failed to create pod %s: %v", pod.Name, err)
	}
	var phase corev1.PodPhase
	Eventually(t, timeout, "pod "+pod.Name+" to finish", func(ctx context.Context) (bool, error) {
		p, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	raw, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("failed to read the log of %s: %v", pod.Name, err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s; log:\n%s", pod.Name, phase, raw)
	}
	return string(raw)
}

// PSQL runs one SQL command with psql in container of pod, against host
// (usually a Service name) as user on database, and returns psql's unaligned,
// tuples-only output. The password comes from the pod's PGPASSWORD.
func (c *Cluster) PSQL(t *testing.T, ns, pod, container, host, user, database, sql string) string {
	t.Helper()
	// A new Service answers once kube-proxy has its endpoints; wait for that
	// instead of failing on the first connection.
	Eventually(t, time.Minute, "PostgreSQL at "+host+" accepting connections", func(ctx context.Context) (bool, error) {
		_, _, err := c.Exec(ctx, ns, pod, container, "pg_isready", "-q", "-h", host, "-t", "2")
		return err == nil, nil
	})
	return c.ExecOK(t, ns, pod, container, "psql", "-h", host, "-U", user, "-d", database, "-v", "ON_ERROR_STOP=1", "-qtAc", sql)
}
