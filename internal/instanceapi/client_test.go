package instanceapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// serve answers the instance API's status path on 127.0.0.1 at the
// contract's port on its own loopback address, as a pod would.
func serve(t *testing.T, h http.HandlerFunc) string {
	return serveOn(t, h, nil)
}

// serveOn is serve with the listener wrapped (TLS), when wrap is set.
func serveOn(t *testing.T, h http.HandlerFunc, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	// Any 127.x address: the client always dials the contract's port.
	for i := 2; i < 250; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(instanceapi.Port)))
		if err != nil {
			continue
		}
		if wrap != nil {
			l = wrap(l)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ip
	}
	t.Fatal("no free loopback address for the instance API port")
	return ""
}

// A pod that answers without end cannot make the operator buffer it: the
// client reads at most a bounded prefix and fails.
func TestStatusReadsABoundedBody(t *testing.T) {
	ip := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"pod":"orders-0","message":"`)
		chunk := strings.Repeat("x", 64<<10)
		for range 64 { // 4 MiB, four times the bound
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
		_, _ = fmt.Fprint(w, `"}`)
	})
	_, err := instanceapi.NewClient(5*time.Second).Status(context.Background(), instanceapi.Target{IP: ip})
	if err == nil {
		t.Fatal("a 4 MiB status was decoded; the body is not bounded")
	}

	ok := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, `{"pod":"orders-1","role":"replica","phase":"Running"}`)
	})
	s, err := instanceapi.NewClient(5*time.Second).Status(context.Background(), instanceapi.Target{IP: ok})
	if err != nil || s.Pod != "orders-1" || s.Role != instanceapi.RoleReplica {
		t.Fatalf("a small status: %+v, %v", s, err)
	}
}

// serveTLS is serve over TLS, with a server certificate for name from a
// new CA whose pool it returns; it counts the connections that served a
// request. (A count in the server's VerifyConnection raced the test: the
// server verifies right after sending its certificate, so a handshake the
// client refuses was counted at a time the test could not wait for.)
func serveTLS(t *testing.T, name string, h http.HandlerFunc) (ip string, roots *x509.CertPool, handshakes *atomic.Int32) {
	t.Helper()
	now := time.Now()
	caCert, caKey, err := pki.NewCA("test CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := pki.Issue(caCert, caKey, name, []string{name}, pki.Server, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AppendCertsFromPEM(caCert)
	handshakes = &atomic.Int32{}
	var seen sync.Map
	counted := func(w http.ResponseWriter, r *http.Request) {
		if _, old := seen.LoadOrStore(r.RemoteAddr, true); !old {
			handshakes.Add(1)
		}
		h(w, r)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	ip = serveOn(t, counted, func(l net.Listener) net.Listener { return tls.NewListener(l, cfg) })
	return ip, roots, handshakes
}

// Status polls reuse one verified connection per instance: a mutual TLS
// handshake per poll cost both busy sides tens of milliseconds in every
// reconcile. A connection serves only the name it was verified for.
func TestStatusKeepsItsVerifiedConnection(t *testing.T) {
	ip, roots, handshakes := serveTLS(t, "orders-0.orders.ns.svc", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, `{"pod":"orders-0","role":"primary","phase":"Running"}`)
	})
	c := instanceapi.NewClient(5 * time.Second)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	target := instanceapi.Target{IP: ip, TLS: cfg, ServerName: "orders-0.orders.ns.svc"}
	for range 5 {
		if s, err := c.Status(context.Background(), target); err != nil || s.Pod != "orders-0" {
			t.Fatalf("status over TLS: %+v, %v", s, err)
		}
	}
	if n := handshakes.Load(); n != 1 {
		t.Fatalf("5 status calls made %d TLS handshakes, want 1", n)
	}
	// Another name at the same address is verified afresh, and refused.
	if _, err := c.Status(context.Background(), instanceapi.Target{IP: ip, TLS: cfg, ServerName: "orders-1.orders.ns.svc"}); err == nil {
		t.Fatal("a certificate for orders-0 was accepted for orders-1")
	}
	// A new configuration (renewed certificates) makes a new connection.
	before := handshakes.Load()
	renewed := cfg.Clone()
	if _, err := c.Status(context.Background(), instanceapi.Target{IP: ip, TLS: renewed, ServerName: "orders-0.orders.ns.svc"}); err != nil {
		t.Fatal(err)
	}
	if n := handshakes.Load() - before; n != 1 {
		t.Fatalf("a new configuration made %d handshakes, want 1", n)
	}
}

// The API token never travels in clear: a call that carries it to an
// instance that serves no TLS is refused before anything is sent, so a
// look-alike pod without daytwo's certificate never sees it.
func TestTokenIsNeverSentOverPlainHTTP(t *testing.T) {
	var got atomic.Int32
	ip := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(instanceapi.AuthorizationHeader) != "" {
			got.Add(1)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("{}"))
	})
	err := instanceapi.NewClient(5*time.Second).Promote(context.Background(), instanceapi.Target{IP: ip}, "secret-token", "")
	if err == nil || got.Load() != 0 {
		t.Fatalf("a promote over plain HTTP: err %v, the server saw the token %d times", err, got.Load())
	}
}
