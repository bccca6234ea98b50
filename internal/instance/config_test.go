package instance

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

func TestUpstream(t *testing.T) {
	t.Parallel()
	inCluster := &Config{Cluster: "orders", Namespace: "shop", Pod: "orders-2", Port: 5432, PrimaryHost: "orders-rw"}
	listed := &Config{Cluster: "orders", Pod: "orders-2", Port: 5432, PrimaryHost: "127.0.0.1", PrimaryPort: 7000,
		Peers: map[string]string{"orders-0": "127.0.0.1:7001"}}
	for _, tc := range []struct {
		name   string
		cfg    *Config
		holder string
		host   string
		port   int
	}{
		{"in a pod, the holder's DNS name", inCluster, "orders-1", "orders-1.orders.shop.svc", 5432},
		{"holder unknown: the -rw Service", inCluster, "", "orders-rw", 5432},
		{"holder is this instance, about to be promoted", inCluster, "orders-2", "orders-rw", 5432},
		{"a listed peer", listed, "orders-0", "127.0.0.1", 7001},
		{"a peer not listed", listed, "orders-1", "127.0.0.1", 7000},
	} {
		if host, port := tc.cfg.upstream(tc.holder); host != tc.host || port != tc.port {
			t.Errorf("%s: upstream = %s:%d, want %s:%d", tc.name, host, port, tc.host, tc.port)
		}
	}
}

func TestParsePeers(t *testing.T) {
	t.Parallel()
	got, err := ParsePeers("peers", "orders-0=127.0.0.1:7001,orders-1=[::1]:7002")
	if err != nil || len(got) != 2 || got["orders-1"] != "[::1]:7002" {
		t.Fatalf("ParsePeers = %v, %v", got, err)
	}
	if got, err := ParsePeers("peers", ""); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ParsePeers(\"\") = %v, %v; want an empty map", got, err)
	}
	for _, bad := range []string{"orders-0", "orders-0=127.0.0.1", "=127.0.0.1:1"} {
		if _, err := ParsePeers("peers", bad); err == nil || !strings.Contains(err.Error(), "--peers") {
			t.Errorf("ParsePeers(%q) = %v, want an error naming --peers", bad, err)
		}
	}
}

// pgx parses the connection strings this instance dials others with (slot
// commands, the checkpoint before a rewind): they must not name a client
// certificate file pgx would try to load.
func TestSSLParamsParseWithPgx(t *testing.T) {
	t.Parallel()
	c := &Config{TLS: true, RunDir: t.TempDir()}
	ca, _, err := pki.NewCA("test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.tlsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.tlsFiles()[instanceapi.SecretTLSCA], ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pgconn.ParseConfig("host=orders-0.orders.shop.svc port=5432 user=streaming_replica" + c.sslParams()); err != nil {
		t.Fatalf("pgx cannot parse the TLS parameters: %v", err)
	}
	if !strings.Contains(c.sslParams(), "sslmode=verify-full") {
		t.Errorf("the server is not verified: %s", c.sslParams())
	}
}
