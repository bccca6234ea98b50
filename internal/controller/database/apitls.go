package database

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// The instance API over mutual TLS: an instance serves it with the
// certificate it serves PostgreSQL with, and requires of every call but
// the kubelet's probes a client certificate from the Database's daytwo CA
// (<name>-ca, which exists for a user's server certificate too). The
// operator issues itself one per Database, in memory only, and verifies
// the instance against the served CA and the pod's name.

// apiClientValidity is how long the operator's client certificate lives;
// it is issued again past half of it.
const apiClientValidity = 7 * 24 * time.Hour

// apiClientName is the operator's client certificate's common name.
const apiClientName = "daytwo-operator"

// apiTLSCache keeps each Database's client configuration until a Secret
// it was made from changes.
type apiTLSCache struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]apiTLSEntry
}

type apiTLSEntry struct {
	caVersion, servedVersion string
	notAfter                 time.Time
	cfg                      *tls.Config
}

func (c *apiTLSCache) get(key types.NamespacedName) (apiTLSEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return e, ok
}

func (c *apiTLSCache) put(key types.NamespacedName, e apiTLSEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[types.NamespacedName]apiTLSEntry{}
	}
	c.entries[key] = e
}

// forget drops a deleted Database's entry.
func (c *apiTLSCache) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// apiTLS is the configuration the operator calls db's instances with:
// the served CA to verify them, and its client certificate.
func (r *Reconciler) apiTLS(ctx context.Context, db *v1alpha1.Database) (*tls.Config, error) {
	secretGVK := corev1.SchemeGroupVersion.WithKind("Secret")
	ca := metadataOf(secretGVK, db.Namespace, caSecretName(db))
	served := metadataOf(secretGVK, db.Namespace, serverTLSSecretName(db))
	key := client.ObjectKeyFromObject(db)
	now := r.Clock.Now()
	cached, hasCached := r.apiTLSCache.get(key)
	hasCached = hasCached && now.Before(cached.notAfter)
	for _, m := range []client.Object{ca, served} {
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			if hasCached {
				// The instances serve their projected copy meanwhile (a
				// user's Secret deleted and made again, say).
				return cached.cfg, nil
			}
			return nil, fmt.Errorf("failed to get Secret %s: %w", m.GetName(), err)
		}
	}
	if hasCached && cached.caVersion == ca.ResourceVersion && cached.servedVersion == served.ResourceVersion &&
		now.Add(apiClientValidity/2).Before(cached.notAfter) {
		return cached.cfg, nil
	}
	read := func(name string) (*corev1.Secret, error) {
		s := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); err != nil {
			return nil, fmt.Errorf("failed to get Secret %s: %w", name, err)
		}
		return s, nil
	}
	caSecret, err := read(caSecretName(db))
	if err != nil {
		return nil, err
	}
	servedSecret, err := read(serverTLSSecretName(db))
	if err != nil {
		return nil, err
	}
	cert, certKey, err := pki.Issue(caSecret.Data[pki.CACert], caSecret.Data[pki.CAKey], apiClientName, nil, pki.Client, now, apiClientValidity)
	if err != nil {
		return nil, fmt.Errorf("failed to issue the instance API client certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, certKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(servedSecret.Data[pki.CACert]) {
		return nil, fmt.Errorf("secret %s has no CA certificate in %s", servedSecret.Name, pki.CACert)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}}
	r.apiTLSCache.put(key, apiTLSEntry{caVersion: caSecret.ResourceVersion, servedVersion: servedSecret.ResourceVersion,
		notAfter: pair.Leaf.NotAfter, cfg: cfg})
	return cfg, nil
}

// servesAPITLS says whether pod's instance API is HTTPS: its probes say
// so. A pod an older daytwo made serves plain HTTP until it rolls.
func servesAPITLS(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == containerPostgres && c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			return c.ReadinessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS
		}
	}
	return false
}

// target is how the operator reaches pod's instance API.
func (r *Reconciler) target(ctx context.Context, db *v1alpha1.Database, pod *corev1.Pod) (instanceapi.Target, error) {
	t := instanceapi.Target{IP: pod.Status.PodIP}
	if t.IP == "" {
		return t, fmt.Errorf("pod %s has no IP", pod.Name)
	}
	if !servesAPITLS(pod) {
		return t, nil
	}
	cfg, err := r.apiTLS(ctx, db)
	if err != nil {
		return t, err
	}
	t.TLS, t.ServerName = cfg, db.InstanceHost(pod.Name)
	return t, nil
}

// targetOf is target for the pod of that name in obs.
func (r *Reconciler) targetOf(ctx context.Context, db *v1alpha1.Database, obs *observation, name string) (instanceapi.Target, error) {
	if p := obs.PodNamed(name); p != nil {
		return r.target(ctx, db, p)
	}
	return instanceapi.Target{}, fmt.Errorf("pod %s does not exist", name)
}
