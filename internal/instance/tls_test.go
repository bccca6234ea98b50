package instance_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// testCA issues server certificates for localhost, as the operator does
// for a Database's names.
type testCA struct {
	t         *testing.T
	cert, key []byte
}

func newTestCA(t *testing.T) *testCA {
	cert, key, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{t: t, cert: cert, key: key}
}

// issue projects a new server certificate into in's secrets, as the
// kubelet does, and returns its serial number.
func (ca *testCA) issue(in *instance) string {
	cert, key, err := pki.Issue(ca.cert, ca.key, "localhost", []string{"localhost"}, pki.Server, time.Now(), time.Hour)
	if err != nil {
		ca.t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.cert, "api-client-ca.crt": ca.cert} {
		in.writeFile("secrets/"+name+".new", string(b))
		if err := os.Rename(filepath.Join(in.root, "secrets", name+".new"), filepath.Join(in.root, "secrets", name)); err != nil {
			ca.t.Fatal(err)
		}
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		ca.t.Fatal(err)
	}
	in.api = ca.apiClient("daytwo-operator", nil)
	return pair.Leaf.SerialNumber.String()
}

// apiClient calls an instance API over HTTPS, verifying it as localhost
// against this CA, with a client certificate for cn ("" for none) from
// issuer (this CA when nil).
func (ca *testCA) apiClient(cn string, issuer *testCA) *http.Client {
	if issuer == nil {
		issuer = ca
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.cert)
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if cn != "" {
		cert, key, err := pki.Issue(issuer.cert, issuer.key, cn, nil, pki.Client, time.Now(), time.Hour)
		if err != nil {
			ca.t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			ca.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// servedSerial connects with sslmode=verify-full and returns the serial
// number of the certificate the server presented.
func (ca *testCA) servedSerial(ctx context.Context, in *instance) (string, error) {
	root := filepath.Join(ca.t.TempDir(), "ca.crt")
	if err := os.WriteFile(root, ca.cert, 0o600); err != nil {
		return "", err
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=localhost port=%d dbname=orders user=shop sslmode=verify-full sslrootcert=%s", in.pgPort, root))
	if err != nil {
		return "", err
	}
	cfg.Password = appPassword
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	tc, ok := conn.PgConn().Conn().(*tls.Conn)
	if !ok {
		return "", fmt.Errorf("the connection is not TLS: %T", conn.PgConn().Conn())
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// With --tls the instance serves its projected certificate, refuses every
// plaintext network connection, streams to a replica over verified TLS,
// and serves a renewed certificate without restarting postgres.
func TestTLSRequiredVerifiedAndRenewedWithoutRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ca := newTestCA(t)
	prim := newInstance(t, "--tls")
	prim.writeFile("secrets/api-token", apiToken)
	first := ca.issue(prim)
	prim.start("orders-0")
	prim.waitReady(time.Minute)

	if serial, err := ca.servedSerial(ctx, prim); err != nil || serial != first {
		t.Fatalf("verify-full against localhost: serial %s, err %v; want the projected certificate %s", serial, err, first)
	}
	checkAPIClientCertificates(t, ca, prim)
	if _, err := prim.connectSSL(ctx, "disable", "shop", appPassword, "orders"); err == nil || !strings.Contains(err.Error(), "no encryption") {
		t.Errorf("a plaintext connection was not refused for its lack of encryption: %v", err)
	}

	rep := newInstance(t, "--tls", "--role", "replica", "--primary-host", "localhost", "--primary-port", strconv.Itoa(prim.pgPort))
	ca.issue(rep)
	rep.start("orders-1")
	rep.waitReady(2 * time.Minute)
	if got := prim.superuser("SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)"); got != "t" {
		t.Errorf("the replica streams without TLS: pg_stat_ssl.ssl = %q", got)
	}

	started := prim.superuser("SELECT pg_postmaster_start_time()")
	renewed := ca.issue(prim)
	eventually(t, 30*time.Second, func() bool {
		serial, err := ca.servedSerial(ctx, prim)
		return err == nil && serial == renewed
	}, "the renewed certificate served")
	if now := prim.superuser("SELECT pg_postmaster_start_time()"); now != started {
		t.Errorf("postgres restarted to serve the renewed certificate: started %s, then %s", started, now)
	}

	// A certificate that does not match its key is not installed: the
	// server keeps serving the previous pair.
	prim.writeFile("secrets/tls.key", "not a key")
	time.Sleep(3 * time.Second)
	if serial, err := ca.servedSerial(ctx, prim); err != nil || serial != renewed {
		t.Errorf("after a broken renewal: serial %s, err %v; want the previous %s", serial, err, renewed)
	}
	// Nor does the API stop answering: the probes would fail every pod.
	resp, err := ca.apiClient("", nil).Get(prim.url(instanceapi.PathReadyz))
	if err != nil {
		t.Errorf("readyz after a broken renewal: %v; the API must serve the previous pair", err)
	} else {
		_ = resp.Body.Close()
	}
}

// checkAPIClientCertificates: the instance API is HTTPS; the probes'
// paths answer anyone, /status and the calls that change the instance
// need a client certificate from the Database's CA (and those calls the
// token too); a certificate from another CA fails the handshake.
func checkAPIClientCertificates(t *testing.T, ca *testCA, in *instance) {
	t.Helper()
	get := func(c *http.Client, path string) (int, error) {
		resp, err := c.Get(in.url(path))
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	anonymous := ca.apiClient("", nil)
	if code, err := get(anonymous, instanceapi.PathReadyz); err != nil || code != http.StatusOK {
		t.Errorf("readyz without a client certificate (the kubelet's probe): %d, %v; want 200", code, err)
	}
	if code, err := get(anonymous, instanceapi.PathStatus); err != nil || code != http.StatusUnauthorized {
		t.Errorf("status without a client certificate: %d, %v; want 401", code, err)
	}
	if code, err := get(in.client(), instanceapi.PathStatus); err != nil || code != http.StatusOK {
		t.Errorf("status with the operator's client certificate: %d, %v; want 200", code, err)
	}
	resp, err := anonymous.Post(in.url(instanceapi.PathCheckpoint), "application/json", strings.NewReader("{}"))
	if err == nil {
		_ = resp.Body.Close()
	}
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("checkpoint without a client certificate: %v, %v; want 401", resp, err)
	}
	if code := post(t, in, instanceapi.PathCheckpoint, "", struct{}{}, nil); code != http.StatusUnauthorized {
		t.Errorf("checkpoint with the client certificate but no token: %d; want 401", code)
	}
	if code := post(t, in, instanceapi.PathCheckpoint, apiToken, struct{}{}, nil); code != http.StatusOK {
		t.Errorf("checkpoint with the client certificate and the token: %d; want 200", code)
	}
	stranger := ca.apiClient("daytwo-operator", newTestCA(t))
	if code, err := get(stranger, instanceapi.PathStatus); err == nil {
		t.Errorf("a client certificate from another CA was accepted: %d", code)
	}
}
