package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/daytwo-dev/daytwo/internal/pki"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;update,resourceNames=daytwo-validating-webhook

// Certs keeps the webhook's TLS material without cert-manager: a
// self-signed CA and a serving certificate for the webhook Service, kept in
// a Secret so every replica serves the same, written to Dir for the
// webhook server, and the CA set as caBundle of the webhook configuration.
type Certs struct {
	// Client must read from the API server (the operator's cache holds no Secret data).
	Client client.Client
	// Namespace, Service and Secret locate the webhook Service and the Secret.
	Namespace, Service, Secret string
	// Configuration is the ValidatingWebhookConfiguration to patch.
	Configuration string
	// Dir is where tls.crt and tls.key are written.
	Dir string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Lifetime is a serving certificate's validity; zero means a year.
	Lifetime time.Duration
}

// lifetime is a serving certificate's validity.
func (c *Certs) lifetime() time.Duration {
	if c.Lifetime <= 0 {
		return 365 * 24 * time.Hour
	}
	return c.Lifetime
}

// renewBefore is how long before expiry a serving certificate is replaced:
// 30 days, or a third of a shorter lifetime.
func (c *Certs) renewBefore() time.Duration { return min(30*24*time.Hour, c.lifetime()/3) }

// checkEvery is how often Run checks the certificate: hourly, or more often
// for a short lifetime.
func (c *Certs) checkEvery() time.Duration { return min(time.Hour, c.lifetime()/12) }

// Run keeps the webhook's certificate valid while the operator runs: each
// checkEvery it ensures it (Ensure), so a certificate about to expire is
// renewed, by whichever replica sees it first, and every replica writes the
// renewed one to Dir, where the webhook server's certificate watcher
// reloads it. Without this, validation would stop silently a year after
// the operator started (the webhook fails open). It returns when ctx ends.
func (c *Certs) Run(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhook-certs")
	t := time.NewTicker(c.checkEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.Ensure(ctx); err != nil {
			log.Error(err, "Failed to renew the webhook certificate; the next check tries again")
		}
	}
}

// Ensure makes the TLS material valid for at least renewBefore and puts it
// in place. Replicas that race create the Secret once and all use it.
func (c *Certs) Ensure(ctx context.Context) error {
	s, err := c.secret(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", c.Dir, err)
	}
	// The bundle first: a renewed certificate from a new CA must verify
	// before it is served.
	if err := c.injectCABundle(ctx, caBundle(s.Data)); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"tls.crt": s.Data["tls.crt"], "tls.key": s.Data["tls.key"]} {
		if err := writeIfChanged(filepath.Join(c.Dir, name), data); err != nil {
			return err
		}
	}
	return nil
}

// caBundle is the CA, and the one before it while a certificate it signed
// may still be served by a replica that has not read the renewal yet.
func caBundle(data map[string][]byte) []byte {
	return append(append([]byte(nil), data[pki.CACert]...), data[previousCA]...)
}

// previousCA keeps the CA a new one replaced (see caBundle).
const previousCA = "ca.previous.crt"

// writeIfChanged replaces path with data, in one rename, unless it holds it.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to replace %s: %w", filepath.Base(path), err)
	}
	return nil
}

func (c *Certs) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// secret returns a Secret with valid material, creating or renewing it.
func (c *Certs) secret(ctx context.Context) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: c.Namespace, Name: c.Secret}
	s := &corev1.Secret{}
	err := c.Client.Get(ctx, key, s)
	if client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("failed to get Secret %s: %w", c.Secret, err)
	}
	if err == nil && c.valid(s.Data) {
		return s, nil
	}
	data, genErr := c.generate(s.Data)
	if genErr != nil {
		return nil, genErr
	}
	if apierrors.IsNotFound(err) {
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Secret,
			Labels: map[string]string{"app.kubernetes.io/name": "daytwo"}}, Type: corev1.SecretTypeTLS, Data: data}
		if err := c.Client.Create(ctx, s); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return c.secret(ctx) // another replica made it first
			}
			return nil, fmt.Errorf("failed to create Secret %s: %w", c.Secret, err)
		}
		return s, nil
	}
	base := s.DeepCopy()
	s.Data = data
	if err := c.Client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, fmt.Errorf("failed to renew Secret %s: %w", c.Secret, err)
	}
	return s, nil
}

// valid: the serving certificate chains to the CA, names the Service and
// has at least renewBefore left.
func (c *Certs) valid(data map[string][]byte) bool {
	notAfter, err := pki.Verify(data[pki.TLSCert], data[pki.TLSKey], data[pki.CACert], c.dnsNames(), pki.Server, c.now())
	return err == nil && c.now().Add(c.renewBefore()).Before(notAfter)
}

// caLifetime is the CA's validity: ten years, or ten lifetimes of a short one.
func (c *Certs) caLifetime() time.Duration { return min(10*365*24*time.Hour, 10*c.lifetime()) }

func (c *Certs) dnsNames() []string {
	return []string{c.Service + "." + c.Namespace, c.Service + "." + c.Namespace + ".svc", c.Service + "." + c.Namespace + ".svc.cluster.local"}
}

// generate issues a serving certificate for lifetime from the CA in old,
// kept while it outlives the certificate by renewBefore; otherwise from a
// new CA (caLifetime), keeping the old one for the bundle.
func (c *Certs) generate(old map[string][]byte) (map[string][]byte, error) {
	now := c.now()
	caCert, caKey := old[pki.CACert], old[pki.CAKey]
	data := map[string][]byte{}
	if notAfter, err := pki.CANotAfter(caCert, caKey); err != nil || !now.Add(c.lifetime()+c.renewBefore()).Before(notAfter) {
		if caCert, caKey, err = pki.NewCA("daytwo-webhook-ca", now, c.caLifetime()); err != nil {
			return nil, err
		}
		if len(old[pki.CACert]) > 0 {
			data[previousCA] = old[pki.CACert]
		}
	} else if prev := old[previousCA]; len(prev) > 0 {
		data[previousCA] = prev
	}
	cert, key, err := pki.Issue(caCert, caKey, c.dnsNames()[1], c.dnsNames(), pki.Server, now, c.lifetime())
	if err != nil {
		return nil, err
	}
	data[pki.CACert], data[pki.CAKey], data[pki.TLSCert], data[pki.TLSKey] = caCert, caKey, cert, key
	return data, nil
}

// injectCABundle sets caBundle on every webhook of the configuration.
func (c *Certs) injectCABundle(ctx context.Context, ca []byte) error {
	if len(ca) == 0 {
		return errors.New("the webhook Secret holds no CA")
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: c.Configuration}, cfg); err != nil {
			return fmt.Errorf("failed to get ValidatingWebhookConfiguration %s: %w", c.Configuration, err)
		}
		changed := false
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, ca) {
				cfg.Webhooks[i].ClientConfig.CABundle, changed = ca, true
			}
		}
		if !changed {
			return nil
		}
		return c.Client.Update(ctx, cfg)
	})
}
