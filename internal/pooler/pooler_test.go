package pooler_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/daytwo-dev/daytwo/internal/instance"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
	"github.com/daytwo-dev/daytwo/internal/pooler"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// program is PgBouncer under test: DAYTWO_PGBOUNCER (`make test` sets it
// to trixie's build, the image's, from hack/pgroot.sh pgbouncer).
func program(t *testing.T) string {
	p := os.Getenv("DAYTWO_PGBOUNCER")
	if p == "" {
		t.Skip("DAYTWO_PGBOUNCER is not set: run `make test`, which sets it (hack/pgroot.sh pgbouncer)")
	}
	return p
}

// rig is a real PostgreSQL with TLS and a real PgBouncer run by the
// manager in front of it, as a pool's pod runs it.
type rig struct {
	pg      *testpg.Server
	ca      []byte
	caKey   []byte
	port    int
	api     string
	metrics string
	dir     string
}

func startRig(t *testing.T, pgSettings ...string) *rig {
	t.Helper()
	bin := program(t)
	now := time.Now()
	ca, caKey, err := pki.NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{ca: ca, caKey: caKey, dir: t.TempDir()}
	issue := func(cn string, usage pki.Usage) ([]byte, []byte) {
		c, k, err := pki.Issue(ca, caKey, cn, []string{"localhost"}, usage, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	// PostgreSQL serves TLS for "localhost", as an instance serves it for
	// its Services' names.
	pgCert, pgKey := issue("localhost", pki.Server)
	for name, b := range map[string][]byte{"pg.crt": pgCert, "pg.key": pgKey} {
		if err := os.WriteFile(filepath.Join(r.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	testpg.ChownToRunner(t, r.dir)
	r.pg = testpg.Start(t, append([]string{"listen_addresses=127.0.0.1,::1", "ssl=on", "ssl_cert_file=" + filepath.Join(r.dir, "pg.crt"),
		"ssl_key_file=" + filepath.Join(r.dir, "pg.key")}, pgSettings...)...)
	ctx := context.Background()
	conn, err := r.pg.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := instance.EnsurePoolerAuth(ctx, conn, "pooler-auth-password-1"); err != nil {
		t.Fatal(err)
	}
	r.pg.Exec(t, "postgres", "CREATE ROLE shop LOGIN PASSWORD 'shop-pass-1'; CREATE ROLE admin SUPERUSER LOGIN PASSWORD 'admin-pass-1';"+
		"CREATE TABLE orders (id int PRIMARY KEY); GRANT ALL ON orders TO shop")

	secrets := filepath.Join(r.dir, "secrets")
	poolCert, poolKey := issue("localhost", pki.Server)
	for name, b := range map[string][]byte{pooler.SecretAuthPassword: []byte("pooler-auth-password-1"), pooler.SecretTLSCert: poolCert,
		pooler.SecretTLSKey: poolKey, pooler.SecretServerCA: ca, pooler.SecretClientCA: ca} {
		if err := os.MkdirAll(secrets, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(secrets, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := filepath.Join(r.dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "client-ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, r.dir)
	r.port = testpg.FreePort(t)
	apiPort, metricsPort := testpg.FreePort(t), testpg.FreePort(t)
	r.api, r.metrics = fmt.Sprintf("127.0.0.1:%d", apiPort), fmt.Sprintf("127.0.0.1:%d", metricsPort)
	var cred = testpg.RunnerCredential(t)
	cfg := pooler.Config{PoolerFlags: instanceapi.PoolerFlags{Target: "localhost", TargetPort: r.pg.Port, ListenPort: r.port, PoolMode: "transaction",
		DefaultPoolSize: 10, MaxClientConn: 1100, SecretsDir: secrets, RunDir: run, Program: bin,
		ServerLoginRetry: 250 * time.Millisecond}, APIAddr: r.api, MetricsAddr: r.metrics}
	if cred != nil {
		cfg.Credential = cred.Credential
	}
	m, err := pooler.New(cfg, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := r.connect(ctx, "shop", "shop-pass-1")
		if err == nil {
			_ = c.Close(ctx)
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("PgBouncer did not serve: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connect logs in through the pool as a client would: verify-full
// against the Database's CA.
func (r *rig) connect(ctx context.Context, user, password string) (*pgx.Conn, error) {
	return r.connectMode(ctx, user, password, "verify-full")
}

func (r *rig) connectMode(ctx context.Context, user, password, sslmode string) (*pgx.Conn, error) {
	ca := filepath.Join(r.dir, "client-ca.crt")
	return pgx.Connect(ctx, fmt.Sprintf("host=localhost port=%d user=%s password=%s dbname=postgres sslmode=%s sslrootcert=%s",
		r.port, user, password, sslmode, ca))
}

// call posts to the manager's API, with the operator's client
// certificate unless anonymous.
func (r *rig) call(t *testing.T, path string, body string, anonymous bool) (int, string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(r.ca)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: "localhost"}
	if !anonymous {
		c, k, err := pki.Issue(r.ca, r.caKey, "daytwo-operator", nil, pki.Client, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := client.Post("https://"+r.api+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Through a real PgBouncer the manager runs: a login role connects with
// TLS it verifies and uses prepared statements in transaction mode; the
// superuser, daytwo's auth role and a client without TLS are refused;
// 1,000 clients share a server whose max_connections is 100, all served;
// a pause lets the transaction under way finish and holds a new one
// until the resume, and the API asks for the operator's certificate;
// the metrics show the pools.
func TestPoolerServesPausesAndRefuses(t *testing.T) {
	t.Parallel()
	r := startRig(t, "max_connections=100")
	ctx := context.Background()

	shop, err := r.connect(ctx, "shop", "shop-pass-1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shop.Close(ctx) }()
	// pgx prepares its statements (extended protocol, cached): PgBouncer
	// keeps them across transactions (max_prepared_statements).
	for i := range 3 {
		if _, err := shop.Exec(ctx, "INSERT INTO orders VALUES ($1)", i); err != nil {
			t.Fatalf("insert %d through the pool: %v", i, err)
		}
	}
	for _, who := range [][2]string{{"admin", "admin-pass-1"}, {"postgres", r.pg.Password}, {pooler.AuthUser, "pooler-auth-password-1"}} {
		if c, err := r.connect(ctx, who[0], who[1]); err == nil {
			_ = c.Close(ctx)
			t.Errorf("%s logged in through the pool", who[0])
		}
	}
	if c, err := r.connectMode(ctx, "shop", "shop-pass-1", "disable"); err == nil {
		_ = c.Close(ctx)
		t.Error("a client without TLS was served")
	}

	// 1,000 clients at once, each with a transaction, on a server that
	// takes 100 connections.
	var g errgroup.Group
	conns := make([]*pgx.Conn, 1000)
	for i := range conns {
		g.Go(func() error {
			c, err := r.connect(ctx, "shop", "shop-pass-1")
			if err != nil {
				return err
			}
			conns[i] = c
			_, err = c.Exec(ctx, "SELECT count(*) FROM orders")
			return err
		})
	}
	err = g.Wait()
	for _, c := range conns {
		if c != nil {
			_ = c.Close(ctx)
		}
	}
	if err != nil {
		t.Fatalf("1,000 clients through the pool: %v", err)
	}
	if got := r.pg.Query(t, "postgres", "SELECT (count(*) <= 20)::text FROM pg_stat_activity WHERE usename = 'shop'"); got != "true" {
		t.Errorf("the pool opened more server connections than its size")
	}

	// The API wants the operator's certificate.
	if code, _ := r.call(t, instanceapi.PathPoolerPause, `{"timeout": 5000000000}`, true); code != http.StatusUnauthorized {
		t.Errorf("a pause without a client certificate answered %d, want 401", code)
	}

	// A transaction under way when the pause is asked finishes; the pause
	// answers after its commit; a transaction begun while paused (on a
	// client connected before: a new one waits at its login, whose
	// verifier lookup needs a server) waits for the resume and then
	// succeeds.
	other, err := r.connect(ctx, "shop", "shop-pass-1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()
	tx, err := shop.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (100)"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var committed, paused, waited time.Time
	pauseDone := make(chan string, 1)
	go func() {
		code, body := r.call(t, instanceapi.PathPoolerPause, `{"timeout": 10000000000}`, false)
		mu.Lock()
		paused = time.Now()
		mu.Unlock()
		pauseDone <- fmt.Sprint(code, " ", body)
	}()
	waitPausing(t, r)
	mu.Lock()
	committed = time.Now()
	mu.Unlock()
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the transaction under way failed at the pause: %v", err)
	}
	if got := <-pauseDone; !strings.HasPrefix(got, "200") {
		t.Fatalf("the pause answered %s", got)
	}
	inserted := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, "INSERT INTO orders VALUES (101)")
		mu.Lock()
		waited = time.Now()
		mu.Unlock()
		inserted <- err
	}()
	waitWaiting(t, r)
	resumed := time.Now()
	if code, body := r.call(t, instanceapi.PathPoolerResume, `{}`, false); code != http.StatusOK {
		t.Fatalf("the resume answered %d %s", code, body)
	}
	if err := <-inserted; err != nil {
		t.Fatalf("the transaction begun while paused failed: %v", err)
	}
	mu.Lock()
	if !paused.After(committed) || !waited.After(resumed) {
		t.Errorf("pause answered %v after the commit, the waiting insert %v after the resume; both must be positive",
			paused.Sub(committed), waited.Sub(resumed))
	}
	mu.Unlock()
	if got := r.pg.Query(t, "postgres", "SELECT count(*) FROM orders WHERE id >= 100"); got != "2" {
		t.Errorf("%s of the two transactions around the pause are there", got)
	}

	// The metrics show the pools.
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{"daytwo_pooler_up 1", `daytwo_pooler_clients_active{database="postgres",user="shop"}`,
		`daytwo_pooler_transactions_total{database="postgres"}`, "daytwo_pooler_paused 0", "daytwo_pooler_clients_max_wait_seconds"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// waitPausing waits until a pause was asked of PgBouncer: the pause's
// console session is waiting.
func waitPausing(t *testing.T, r *rig) {
	t.Helper()
	waitMetric(t, r, "the pause asked", func(m string) bool { return strings.Contains(m, "daytwo_pooler_paused 1") })
}

// waitWaiting waits until a client waits in the paused pool.
func waitWaiting(t *testing.T, r *rig) {
	t.Helper()
	waitMetric(t, r, "a client waiting", func(m string) bool {
		return strings.Contains(m, `daytwo_pooler_clients_waiting{database="postgres",user="shop"} 1`)
	})
}

func waitMetric(t *testing.T, r *rig, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + r.metrics + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if last = string(b); ok(last) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; metrics:\n%s", what, grepPooler(last))
}

func grepPooler(m string) string {
	var out []string
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "daytwo_pooler_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
