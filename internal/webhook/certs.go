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
}

// renewBefore is how long before expiry a serving certificate is replaced.
const renewBefore = 30 * 24 * time.Hour

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
	for name, data := range map[string][]byte{"tls.crt": s.Data["tls.crt"], "tls.key": s.Data["tls.key"]} {
		if err := os.WriteFile(filepath.Join(c.Dir, name), data, 0o600); err != nil {
			return fmt.Errorf("failed to write %s: %w", name, err)
		}
	}
	return c.injectCABundle(ctx, s.Data["ca.crt"])
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
	data, genErr := c.generate()
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
	return err == nil && c.now().Add(renewBefore).Before(notAfter)
}

func (c *Certs) dnsNames() []string {
	return []string{c.Service + "." + c.Namespace, c.Service + "." + c.Namespace + ".svc", c.Service + "." + c.Namespace + ".svc.cluster.local"}
}

// generate makes a CA valid for ten years and a serving certificate for a year.
func (c *Certs) generate() (map[string][]byte, error) {
	now := c.now()
	caCert, caKey, err := pki.NewCA("daytwo-webhook-ca", now, 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, key, err := pki.Issue(caCert, caKey, c.dnsNames()[1], c.dnsNames(), pki.Server, now, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{pki.CACert: caCert, pki.TLSCert: cert, pki.TLSKey: key}, nil
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
