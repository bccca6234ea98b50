package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/testenv"
	"github.com/daytwo-dev/daytwo/internal/webhook"
)

// The webhook's certificate is renewed while the operator runs: served
// through the same certificate watcher as the webhook server, with a
// 6-second certificate, every handshake verifies against the caBundle set
// on the webhook configuration, past the first certificate's expiry, and a
// renewed certificate is served before it. (Before, it was ensured only at
// start: a year later validation stopped, silently, as the webhook fails
// open.)
func TestWebhookCertificateRotatesWhileRunning(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "daytwo-test-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "v.daytwo.dev", SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "daytwo-webhook"}}}}}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certs := &webhook.Certs{Client: env.Client, Namespace: ns, Service: "daytwo-webhook", Secret: "daytwo-webhook-cert",
		Configuration: cfg.Name, Dir: dir, Lifetime: 6 * time.Second}
	if err := certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The renewals write into dir: they end before the test's temporary
	// directory is removed (a write after it was emptied failed its
	// removal, seen in CI). Cleanups run last in first out.
	renewing := make(chan struct{})
	go func() { defer close(renewing); _ = certs.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-renewing })
	watcher, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	watcher.WithWatchInterval(200 * time.Millisecond)
	go func() { _ = watcher.Start(ctx) }()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: watcher.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()

	// handshake verifies the served certificate as the API server would:
	// against the configuration's caBundle, for the Service's name, now.
	handshake := func() (*x509.Certificate, error) {
		live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: cfg.Name}, live); err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(live.Webhooks[0].ClientConfig.CABundle)
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", l.Addr().String(),
			&tls.Config{RootCAs: roots, ServerName: "daytwo-webhook." + ns + ".svc", MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		defer func() { _ = c.Close() }()
		return c.ConnectionState().PeerCertificates[0], nil
	}
	start := time.Now()
	first, err := handshake()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{first.SerialNumber.String(): true}
	for time.Now().Before(first.NotAfter.Add(2 * time.Second)) {
		cert, err := handshake()
		if err != nil {
			t.Fatalf("a handshake failed %s before the first certificate's expiry: %v",
				time.Until(first.NotAfter).Round(100*time.Millisecond), err)
		}
		seen[cert.SerialNumber.String()] = true
		time.Sleep(100 * time.Millisecond)
	}
	if len(seen) < 2 {
		t.Fatalf("one certificate served throughout (serial %s), past its expiry", first.SerialNumber)
	}
	t.Logf("%d certificates served over %s of 6-second certificates, every handshake verified", len(seen),
		time.Since(start).Round(100*time.Millisecond))
}
