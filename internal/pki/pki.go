package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Keys of the Secrets that hold TLS material, as kubernetes.io/tls Secrets
// and cert-manager name them.
const (
	CACert  = "ca.crt"
	CAKey   = "ca.key"
	TLSCert = "tls.crt"
	TLSKey  = "tls.key"
)

// Usage is what a leaf certificate is for.
type Usage int

const (
	// Server certificates authenticate a server to its clients.
	Server Usage = iota
	// Client certificates authenticate a client to a server that asks for one.
	Client
)

// backdate absorbs clock skew between the issuer and whoever verifies.
const backdate = time.Hour

// NewCA makes a self-signed CA named cn, valid for validity from now, and
// returns its certificate and key as PEM.
func NewCA(cn string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create the CA %s: %w", cn, err)
	}
	return encode(der, key)
}

// Issue signs a certificate for cn and dnsNames with the CA (PEM), valid
// for validity from now, and returns it and its new key as PEM.
func Issue(caCertPEM, caKeyPEM []byte, cn string, dnsNames []string, usage Usage, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to load the CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse the CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	ext := x509.ExtKeyUsageServerAuth
	if usage == Client {
		ext = x509.ExtKeyUsageClientAuth
	}
	notAfter := now.Add(validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, DNSNames: dnsNames,
		NotBefore: now.Add(-backdate), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{ext}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to sign a certificate for %s: %w", cn, err)
	}
	return encode(der, key)
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Verify checks that certPEM and keyPEM are a pair, that the certificate
// chains to the CA in caPEM for use, names every one of dnsNames, and is
// valid at now. It returns when the certificate expires.
func Verify(certPEM, keyPEM, caPEM []byte, dnsNames []string, usage Usage, now time.Time) (time.Time, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return time.Time{}, fmt.Errorf("the certificate and key are not a valid pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return time.Time{}, fmt.Errorf("the certificate does not parse: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return time.Time{}, errors.New("the CA certificate does not parse")
	}
	ext := x509.ExtKeyUsageServerAuth
	if usage == Client {
		ext = x509.ExtKeyUsageClientAuth
	}
	intermediates := x509.NewCertPool()
	for _, c := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			intermediates.AddCert(ic)
		}
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{ext}}
	if _, err := leaf.Verify(opts); err != nil {
		return time.Time{}, fmt.Errorf("the certificate does not verify against the CA: %w", err)
	}
	for _, name := range dnsNames {
		if err := leaf.VerifyHostname(name); err != nil {
			return time.Time{}, fmt.Errorf("the certificate does not name %s", name)
		}
	}
	return leaf.NotAfter, nil
}

// Fingerprint is a short stable digest of PEM material, for annotations
// that say which material something was made with.
func Fingerprint(pemBytes []byte) string {
	sum := sha256.Sum256(pemBytes)
	return hex.EncodeToString(sum[:12])
}

// CANotAfter checks that certPEM and keyPEM are a CA certificate and its
// key, and returns when the CA expires.
func CANotAfter(certPEM, keyPEM []byte) (time.Time, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return time.Time{}, fmt.Errorf("the CA certificate and key are not a valid pair: %w", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return time.Time{}, fmt.Errorf("the CA certificate does not parse: %w", err)
	}
	if !ca.IsCA {
		return time.Time{}, errors.New("the certificate is not a CA")
	}
	return ca.NotAfter, nil
}
