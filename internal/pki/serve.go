package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ReloadingServerConfig serves TLS with the certificate and key in files
// (projected from a Secret), read at each handshake so a renewal needs
// nothing more, and verifies a client certificate against the CA in
// clientCAFile when one is presented (the kubelet's probes present none:
// the handler refuses every other call without one). The last pair and
// CA that loaded serve while a renewal is broken (a certificate that
// does not match its key), so the probes stay up.
func ReloadingServerConfig(certFile, keyFile, clientCAFile string) *tls.Config {
	var mu sync.Mutex
	var last *tls.Config
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			mu.Lock()
			defer mu.Unlock()
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			pool := x509.NewCertPool()
			b, rerr := os.ReadFile(clientCAFile)
			if err != nil || rerr != nil || !pool.AppendCertsFromPEM(b) {
				if last != nil {
					return last, nil
				}
				return nil, fmt.Errorf("the server certificate or the client CA: %w", errors.Join(err, rerr))
			}
			last = &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{pair},
				ClientAuth:   tls.VerifyClientCertIfGiven,
				ClientCAs:    pool,
			}
			return last, nil
		},
	}
}
