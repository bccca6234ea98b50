// Package pooler is daytwo's PgBouncer manager: it runs in each pod of a
// Database's pool (`daytwo pooler run`), writes PgBouncer's configuration
// from its flags and the projected Secrets, runs PgBouncer as its child,
// reloads it when a Secret changes (a renewed certificate), serves
// PgBouncer's pools and stats as Prometheus metrics, and serves the
// operator, over mutual TLS, the pause and resume a switchover wraps
// itself in.
//
// Clients authenticate with SCRAM: PgBouncer looks a role's verifier up
// with auth_query, as the dedicated role daytwo_pooler, through a
// function that answers login roles only (never the superuser, a
// replication role or daytwo's own), and logs in to PostgreSQL as that
// role with the keys the client's SCRAM exchange proved. TLS is required
// of clients (the pool's certificate, from the Database's CA) and of the
// connections to PostgreSQL (verify-full against the served CA).
package pooler

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// AuthUser is the role PgBouncer looks verifiers up as.
const AuthUser = "daytwo_pooler"

// adminUser is the console role the manager pauses and reads stats as;
// its password lives in the manager's memory and the pod's private run
// directory only.
const adminUser = "daytwo_pooler_admin"

// AuthQuery is what PgBouncer asks PostgreSQL for a role's verifier; the
// function (made by the instance manager in database postgres) answers
// only login roles a client may use.
const AuthQuery = "SELECT usename, passwd FROM daytwo_pooler.get_auth($1)"

// Files projected into SecretsDir.
const (
	SecretAuthPassword = "auth-password"
	SecretTLSCert      = "tls.crt"
	SecretTLSKey       = "tls.key"
	// SecretServerCA verifies PostgreSQL (the CA the instances serve).
	SecretServerCA = "server-ca.crt"
	// SecretClientCA verifies the operator's client certificate on the
	// manager's API (daytwo's CA of the Database).
	SecretClientCA = "client-ca.crt"
)

// Config is what `daytwo pooler run` is given: its flags (Target is the
// Service PgBouncer connects to, and the name it verifies PostgreSQL's
// certificate against; SecretsDir holds the projected Secret files;
// RunDir is the pod's private, writable directory; ServerLoginRetry is
// short, so a failover's new primary is found at once), and where the
// manager serves.
type Config struct {
	instanceapi.PoolerFlags
	// APIAddr serves the operator (mutual TLS); MetricsAddr serves
	// /metrics in plain HTTP.
	APIAddr     string
	MetricsAddr string
	// Credential runs PgBouncer as another user (tests run as root, which
	// PgBouncer refuses); nil in a pod.
	Credential *syscall.Credential
}

func (c *Config) iniPath() string      { return filepath.Join(c.RunDir, "pgbouncer.ini") }
func (c *Config) userlistPath() string { return filepath.Join(c.RunDir, "userlist.txt") }
func (c *Config) hbaPath() string      { return filepath.Join(c.RunDir, "pgbouncer_hba.conf") }
func (c *Config) secret(name string) string {
	return filepath.Join(c.SecretsDir, name)
}

// ini is PgBouncer's configuration. Every value comes from flags the
// operator validated or from fixed names; none from a client. Every TLS
// side names its CA file: without one, PgBouncer loads the system's CA
// bundle, which the image does not have, and refuses to start.
func (c *Config) ini() string {
	var b strings.Builder
	fmt.Fprintf(&b, `;; Written by the daytwo pooler manager at every start; edits are lost.
[databases]
* = host=%s port=%d auth_user=%s

[pgbouncer]
listen_addr = *
listen_port = %d
unix_socket_dir = %s
auth_type = hba
auth_hba_file = %s
auth_file = %s
auth_user = %s
auth_dbname = postgres
auth_query = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = %d
max_prepared_statements = 200
server_login_retry = %g
server_connect_timeout = 5
query_wait_timeout = 120
ignore_startup_parameters = extra_float_digits
client_tls_sslmode = require
client_tls_cert_file = %s
client_tls_key_file = %s
client_tls_ca_file = %s
client_tls_protocols = tlsv1.2,tlsv1.3
server_tls_sslmode = verify-full
server_tls_ca_file = %s
server_tls_protocols = tlsv1.2,tlsv1.3
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 15
`, c.Target, c.TargetPort, AuthUser, c.ListenPort, c.RunDir, c.hbaPath(), c.userlistPath(), AuthUser, AuthQuery, adminUser,
		c.PoolMode, c.DefaultPoolSize, c.MaxClientConn, c.ServerLoginRetry.Seconds(),
		c.secret(SecretTLSCert), c.secret(SecretTLSKey), c.secret(SecretClientCA), c.secret(SecretServerCA))
	return b.String()
}

// hba lets clients in over TLS with SCRAM, never as the auth user or
// the console user (their passwords are in the auth file, so PgBouncer
// would otherwise accept them); the console only over the pod's private
// socket.
const hba = `# Written by the daytwo pooler manager at every start; edits are lost.
local   pgbouncer  ` + adminUser + `  scram-sha-256
local   all        all                  reject
host    all        ` + AuthUser + `        0.0.0.0/0  reject
host    all        ` + AuthUser + `        ::/0       reject
host    all        ` + adminUser + `  0.0.0.0/0  reject
host    all        ` + adminUser + `  ::/0       reject
hostssl all        all                  0.0.0.0/0  scram-sha-256
hostssl all        all                  ::/0       scram-sha-256
`

// userlist is PgBouncer's auth_file: the auth user's password (to log in
// to PostgreSQL) and the console user's. Passwords are quoted as
// PgBouncer reads them: a double quote doubled.
func userlist(authPassword, adminPassword string) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return q(AuthUser) + " " + q(authPassword) + "\n" + q(adminUser) + " " + q(adminPassword) + "\n"
}
