package instanceapi

import (
	"context"
	"time"

	"github.com/spf13/pflag"
)

// The pooler manager's API (internal/pooler), at Port of each PgBouncer
// pod, over mutual TLS with the operator's client certificate (no token:
// a pool's pods hold nothing that reaches the instances).
const (
	// PathPoolerPause (POST, a PoolerPauseRequest) PAUSEs PgBouncer:
	// it answers once every server connection is back in the pool, the
	// transactions under way finished; new ones wait. A pause that does
	// not complete within the request's timeout is resumed and answered
	// 503.
	PathPoolerPause = "/pooler/pause"
	// PathPoolerResume (POST) closes every server connection as it comes
	// back (they reach the old primary) and RESUMEs: waiting clients get
	// new connections, through the -rw Service, to the new primary.
	PathPoolerResume = "/pooler/resume"
	// PathPoolerReady (GET, the kubelet's probe) answers 200 while
	// PgBouncer answers its console.
	PathPoolerReady = "/readyz"
)

// PoolerPauseRequest is the body of POST /pooler/pause.
type PoolerPauseRequest struct {
	// Timeout bounds the wait for transactions under way.
	Timeout time.Duration `json:"timeout"`
}

// PausePooler pauses the PgBouncer at t, waiting up to timeout for its
// transactions under way.
func (c *Client) PausePooler(ctx context.Context, t Target, timeout time.Duration) error {
	return c.post(ctx, t, PathPoolerPause, "", PoolerPauseRequest{Timeout: timeout}, nil, timeout+5*time.Second)
}

// ResumePooler resumes the PgBouncer at t.
func (c *Client) ResumePooler(ctx context.Context, t Target) error {
	return c.post(ctx, t, PathPoolerResume, "", struct{}{}, nil, 10*time.Second)
}

// PathPoolerAuth (POST, authenticated, a PoolerAuthRequest) makes, on the
// primary, the role PgBouncer looks verifiers up as (LOGIN, the request's
// password, no other right) and the function it calls, in database
// postgres: it answers the verifier of a login role that is not a
// superuser, a replication role or daytwo's own. A replica answers 409.
const PathPoolerAuth = "/pooler-auth"

// PoolerAuthRequest is the body of POST /pooler-auth. Absent (the pool
// removed) leaves the role unable to log in.
type PoolerAuthRequest struct {
	Password string `json:"password,omitempty"`
	Absent   bool   `json:"absent,omitempty"`
}

// PoolerAuth asks the primary at t for the pooler's role and function.
func (c *Client) PoolerAuth(ctx context.Context, t Target, token string, req PoolerAuthRequest) error {
	return c.post(ctx, t, PathPoolerAuth, token, req, nil, 30*time.Second)
}

// PoolerFlags are `daytwo pooler run`'s flags: the operator renders them
// with Args for a pool's pods, the binary parses them with Bind.
type PoolerFlags struct {
	Target           string
	TargetPort       int
	ListenPort       int
	PoolMode         string
	DefaultPoolSize  int
	MaxClientConn    int
	SecretsDir       string
	RunDir           string
	Program          string
	ServerLoginRetry time.Duration
}

// Args renders p as `daytwo pooler run`'s flags.
func (p PoolerFlags) Args() []string { return ArgsOf(p, (*PoolerFlags).Bind) }

// Bind defines p's flags on f, with the binary's defaults.
func (p *PoolerFlags) Bind(f *pflag.FlagSet) {
	f.StringVar(&p.Target, "target", "", "Host (a Service) PgBouncer connects to and verifies PostgreSQL's certificate against.")
	f.IntVar(&p.TargetPort, "target-port", PostgresPort, "Port of the target.")
	f.IntVar(&p.ListenPort, "listen-port", PostgresPort, "Port PgBouncer serves clients on.")
	f.StringVar(&p.PoolMode, "pool-mode", "transaction", "transaction or session.")
	f.IntVar(&p.DefaultPoolSize, "default-pool-size", 20, "Server connections per role and database.")
	f.IntVar(&p.MaxClientConn, "max-client-conn", 1000, "Client connections accepted.")
	f.StringVar(&p.SecretsDir, FlagSecretsDir, SecretsDir, "Directory of the projected Secrets (auth-password, tls.crt, tls.key, server-ca.crt, client-ca.crt).")
	f.StringVar(&p.RunDir, FlagRunDir, RunDir, "Private directory for PgBouncer's configuration and socket.")
	f.StringVar(&p.Program, "pgbouncer", "pgbouncer", "PgBouncer's program.")
	f.DurationVar(&p.ServerLoginRetry, "server-login-retry", 100*time.Millisecond, "How soon a failed server connection is tried again: as often as a client retrying on its own would.")
}
