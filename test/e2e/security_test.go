//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// The operator's metrics are HTTPS and need a token allowed to get
// /metrics: none is refused, a ServiceAccount without the grant is
// forbidden, and one bound to daytwo-metrics-reader reads them.
func TestOperatorMetricsNeedAPermittedToken(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ctx := context.Background()
	// A suite before may have killed the operator pod: its replacement
	// alone, and serving (a terminating one refuses connections).
	framework.Eventually(t, 2*time.Minute, "one ready operator pod", func(ctx context.Context) (bool, error) {
		return cluster.OperatorReady(ctx), nil
	})
	pods, err := cluster.Kube.CoreV1().Pods(framework.OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the operator pod: %v", err)
	}
	url := "https://" + net.JoinHostPort(pods.Items[0].Status.PodIP, "8443") + "/metrics"
	ns := cluster.Namespace(t)
	if _, err := cluster.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cluster.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "scraper",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(token string) (int, string) {
		// The operator serves a self-signed certificate: authentication,
		// not the server's identity, is under test here.
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := get(tok.Status.Token); code != http.StatusForbidden {
		t.Errorf("a token without the grant: %d, want 403", code)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-scraper-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "daytwo-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns}}}
	if _, err := cluster.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// The operator caches a refusal for 30 s (controller-runtime's
	// delegating authorizer), so the grant shows after that.
	framework.Eventually(t, 90*time.Second, "metrics with the granted token", func(context.Context) (bool, error) {
		code, body := get(tok.Status.Token)
		if code != http.StatusOK {
			return false, nil
		}
		if !strings.Contains(body, "controller_runtime_reconcile_total") {
			return false, fmt.Errorf("metrics lack controller_runtime_reconcile_total")
		}
		return true, nil
	})
}

// The secrets scan every suite's namespace goes through can fail: a
// Secret's password in a pod's arguments is found, and named without
// being printed.
func TestSecretsScanFindsALeak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.Namespace(t)
	value := "planted-" + ns
	secret(t, ns, "planted", map[string]string{"password": value, "username": "not-a-secret"})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaky"}, Spec: corev1.PodSpec{
		SecurityContext: framework.RestrictedPod(),
		Containers: []corev1.Container{{Name: "c", Image: framework.PauseImage, Args: []string{"--password=" + value},
			Env: []corev1.EnvVar{{Name: "USER", Value: "not-a-secret"}}, SecurityContext: framework.RestrictedContainer()}},
	}}
	if err := cluster.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	found, err := cluster.ScanSecrets(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	want := ns + "/planted[password] appears in pod leaky container c command, args or env"
	if len(found) != 1 || found[0] != want {
		t.Fatalf("the scan found %q; want exactly %q", found, want)
	}
	if strings.Contains(found[0], value) {
		t.Fatal("the scan printed the secret it found")
	}
	// The suite's own scan at the end must pass: the planted secret goes.
	if err := cluster.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planted"}}); err != nil {
		t.Fatal(err)
	}
}
