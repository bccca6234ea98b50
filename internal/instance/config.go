package instance

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pooler"
)

// Config is everything the instance manager needs to know; the operator
// passes it as flags and environment in the pod template.
type Config struct {
	// PGData is the data directory.
	PGData string
	// ParametersFile is the operator's rendered postgresql.conf (a ConfigMap
	// key); the managed postgresql.conf includes it.
	ParametersFile string
	// SecretsDir holds the files app-password and replication-password.
	SecretsDir string
	// RunDir holds the unix socket and the password file; it must not be shared.
	RunDir string
	// HTTPAddress is where the instanceapi server listens.
	HTTPAddress string
	// MetricsAddress is where /metrics is served (metrics.go); empty
	// serves none.
	MetricsAddress string
	// Port is PostgreSQL's TCP port.
	Port int
	// Cluster is the Database's name (cluster_name), in Namespace.
	Cluster, Namespace string
	// TLS serves and requires TLS (see tls.go).
	TLS bool
	// Pod is this pod's name.
	Pod string
	// Role is what this instance runs as.
	Role instanceapi.Role
	// PrimaryHost and PrimaryPort are where a replica clones and streams
	// from when it cannot tell the primary's own address (see upstream).
	PrimaryHost string
	PrimaryPort int
	// Peers are the other instances' addresses (host:port) by pod name.
	// Nil means each instance's instanceapi.PeerHost on Port. An instance
	// missing from a non-nil map is reached at PrimaryHost.
	Peers map[string]string
	// PeerAPIs are the other instances' API addresses (host:port) by pod
	// name, for a holder to ask for promises (vouch.go). Nil means each
	// instance's instanceapi.PeerHost on instanceapi.Port.
	PeerAPIs map[string]string
	// Database and Owner are the application database and its owner role.
	Database, Owner string
	// FromBackup is true when the primary bootstraps from a backup instead of initdb.
	FromBackup bool
	// Source is what a replica Database follows (openSource reads it
	// from the operator's file, once, before anything runs); nil otherwise.
	Source *instanceapi.ReplicaSource
	// Import, when set, bootstraps the primary by copying databases from a
	// running PostgreSQL (bootstrap.import).
	Import *ImportSource
	// ShutdownTimeout bounds the fast shutdown before an immediate one.
	ShutdownTimeout time.Duration
	// LeaseDuration is the primary lease's term this instance records at
	// its renewals and fences by; 0 is instanceapi.LeaseDuration.
	LeaseDuration time.Duration
	// BinDir is where the PostgreSQL programs are; empty means $PATH.
	BinDir string
	// DatabaseUID is the Database's metadata.uid. With it, the data
	// directory records which Database made it, and data made by another
	// (a retained volume) is never served silently. Empty skips the check.
	DatabaseUID string
	// BootstrapSource is how the Database's spec bootstraps: instanceapi.BootstrapInitDB
	// or "fromBackup/<DatabaseBackup>".
	BootstrapSource string
	// ReuseData runs on data another Database made, whatever its bootstrap:
	// the user's explicit choice (annotation daytwo.dev/reuse-data).
	ReuseData bool
	// UpgradeFrom is the bundle of the old major's programs for a major
	// upgrade of the data; empty when none is asked for.
	UpgradeFrom string
	// UpgradeDeadline bounds the upgraded server's first start.
	UpgradeDeadline time.Duration
}

// rewinding, next to PGData on the same volume (pg_rewind would delete a
// file inside it that the source lacks), exists while pg_rewind runs: an
// interrupted rewind leaves data that cannot be trusted, and the next start
// clones the primary instead.
func (c *Config) rewinding() string { return filepath.Clean(c.PGData) + ".rewinding" }

// staging is where a bootstrap builds the data directory; it becomes
// PGData by one rename once it is complete, on the same volume.
func (c *Config) staging() string { return filepath.Clean(c.PGData) + ".bootstrap" }

// Validate checks the fields that have no safe default.
func (c *Config) Validate() error {
	var missing []string
	for _, f := range []struct{ name, value string }{{"pgdata", c.PGData}, {"parameters-file", c.ParametersFile},
		{"secrets-dir", c.SecretsDir}, {"run-dir", c.RunDir}, {"cluster", c.Cluster}, {"pod", c.Pod}} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if c.Role == instanceapi.RoleReplica && c.PrimaryHost == "" {
		missing = append(missing, "primary-host")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing instance settings: %s", strings.Join(missing, ", "))
	}
	if c.Role != instanceapi.RolePrimary && c.Role != instanceapi.RoleReplica {
		return fmt.Errorf("role must be %q or %q, not %q", instanceapi.RolePrimary, instanceapi.RoleReplica, c.Role)
	}
	return nil
}

const replicationUser = instanceapi.ReplicationUser

func (c *Config) bin(name string) string {
	if c.BinDir == "" {
		return name
	}
	return filepath.Join(c.BinDir, name)
}

func (c *Config) secret(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.SecretsDir, name))
	if err != nil {
		return "", fmt.Errorf("failed to read secret file %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (c *Config) primaryPort() int {
	if c.PrimaryPort == 0 {
		return c.Port
	}
	return c.PrimaryPort
}

// ParsePeers reads Config.Peers (or PeerAPIs) from "pod=host:port,...",
// the value of the flag named flag: empty is no peers.
func ParsePeers(flag, s string) (map[string]string, error) {
	peers := map[string]string{}
	for _, entry := range strings.Split(s, ",") {
		if entry == "" {
			continue
		}
		pod, addr, ok := strings.Cut(entry, "=")
		if _, port, err := net.SplitHostPort(addr); !ok || pod == "" || err != nil || port == "" {
			return nil, fmt.Errorf("--%s: %q is not pod=host:port", flag, entry)
		}
		peers[pod] = addr
	}
	return peers, nil
}

// upstream is where a replica clones and streams from while holder holds
// the primary lease: that instance's own address, so a replica follows a
// new primary the moment the lease moves, or PrimaryHost (the -rw Service)
// while the holder is unknown or this instance itself (about to be promoted).
func (c *Config) upstream(holder string) (string, int) {
	if following(holder) {
		return c.sourceUpstream()
	}
	if holder == "" || holder == c.Pod {
		return c.PrimaryHost, c.primaryPort()
	}
	if c.Peers == nil {
		return instanceapi.PeerHost(c.Cluster, c.Namespace, holder), c.Port
	}
	if host, port, err := net.SplitHostPort(c.Peers[holder]); err == nil {
		if p, err := strconv.Atoi(port); err == nil {
			return host, p
		}
	}
	return c.PrimaryHost, c.primaryPort()
}

func (c *Config) passFile() string { return filepath.Join(c.RunDir, ".pgpass") }

// managedConf is the postgresql.conf in the data directory: the operator's
// settings first, then those daytwo must control, which therefore win. A
// replica streams from holder's upstream (none: a replica Database's
// instance that follows its source's archive only), and runs floors
// above its configuration (see writeStartConfig). role is passed, not
// read from c: a promotion changes c.Role under the manager's lock.
func (c *Config) managedConf(role instanceapi.Role, holder string, floors map[string]floor) string {
	host, port := c.upstream(holder)
	var b strings.Builder
	b.WriteString("# Written by the daytwo instance manager at every start; edits are lost.\n")
	fmt.Fprintf(&b, "include '%s'\n", c.ParametersFile)
	fmt.Fprintf(&b, "listen_addresses = '*'\nport = %d\nunix_socket_directories = '%s'\n", c.Port, c.RunDir)
	fmt.Fprintf(&b, "cluster_name = '%s'\n", c.Cluster)
	if role == instanceapi.RoleReplica && host != "" {
		ssl, name := c.sslParams(), c.Pod
		if following(holder) {
			// A name no pod of the source can have: the source must never
			// count this instance among its synchronous standbys.
			ssl, name = c.sourceSSLParams(), sourceApplicationName(c.Namespace, c.Pod)
		}
		// Bounded: right after a failover the Service may still send a
		// connection to the old primary's vanished address, where a TCP
		// connect would hang for minutes. The walreceiver connects
		// asynchronously, which ignores connect_timeout, so the socket's
		// own TCP_USER_TIMEOUT bounds the connect; keepalives notice a dead
		// primary on a connection already open.
		fmt.Fprintf(&b, "primary_conninfo = 'host=%s port=%d user=%s passfile=%s application_name=%s "+
			"connect_timeout=3 tcp_user_timeout=5000 keepalives_idle=5 keepalives_interval=2 keepalives_count=3%s'\n",
			host, port, replicationUser, c.passFile(), name, ssl+c.libpqClientParams())
		if r, err := c.replication(); err == nil && slices.Contains(r.Instances, c.Pod) && !following(holder) {
			fmt.Fprintf(&b, "primary_slot_name = '%s'\n", slotName(c.Pod))
		}
	}
	if role == instanceapi.RoleReplica && following(holder) {
		// The source's next WAL comes when it archives it (or streams):
		// asking every 200 ms would log a line each time.
		b.WriteString("wal_retrieve_retry_interval = '5s'\n")
	}
	if role == instanceapi.RoleReplica {
		if len(floors) > 0 {
			b.WriteString("# The primary's logged values, until this replica replays their change:\n")
			b.WriteString(floorSettings(floors))
		}
		b.WriteString(c.standbyRestoreSettings())
	}
	b.WriteString(c.sslSettings())
	b.WriteString(c.archiveSettings())
	fmt.Fprintf(&b, "include_if_exists '%s'\n", syncFile)
	return b.String()
}

// hbaConf allows the superuser only over the local socket, by peer with an
// ident map, the pools' auth role only in database postgres (where its
// one function is), and everyone else only with scram-sha-256 passwords.
// Nothing is trusted. The socket's directory is private (0700) to the instance
// manager's user, so the map can let that user, whatever its name, in as
// postgres. With tls, network connections must use TLS: a plaintext one
// matches no line and is refused.
func hbaConf(tls bool) string {
	host := "host   "
	if tls {
		host = "hostssl"
	}
	return `# Written by the daytwo instance manager at every start; edits are lost.
# TYPE  DATABASE     USER                ADDRESS  METHOD
local   all          postgres                     peer map=daytwo
local   all          all                          scram-sha-256
` + host + ` replication  ` + replicationUser + `           all      scram-sha-256
` + host + ` all          postgres            all      reject
` + host + ` postgres     ` + pooler.AuthUser + `       all      scram-sha-256
host    all          ` + pooler.AuthUser + `       all      reject
` + host + ` all          all                 all      scram-sha-256
`
}

// writeConfig writes the managed files into the data directory dir and the
// password file the replica streams with from holder's upstream, for an
// instance running as role.
func (c *Config) writeConfig(dir string, role instanceapi.Role, holder string, floors map[string]floor) error {
	files := map[string]string{
		filepath.Join(dir, "postgresql.conf"): c.managedConf(role, holder, floors),
		filepath.Join(dir, "pg_hba.conf"):     hbaConf(c.TLS),
		filepath.Join(dir, "pg_ident.conf"):   "# Written by the daytwo instance manager.\ndaytwo  /^(.*)$  postgres\n",
	}
	names, err := c.startingSyncNames()
	if err != nil {
		return err
	}
	files[filepath.Join(dir, syncFile)] = syncConf(names)
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
		}
	}
	standby := filepath.Join(dir, "standby.signal")
	if role == instanceapi.RoleReplica {
		if err := c.writePassFile(); err != nil {
			return err
		}
		return os.WriteFile(standby, nil, 0o600)
	}
	return nil
}

func (c *Config) writePassFile() error {
	pw, err := c.secret(instanceapi.SecretReplicationPassword)
	if err != nil {
		return err
	}
	// The source's line first: the first line that matches is used.
	line, err := c.sourcePassLine()
	if err != nil {
		return err
	}
	line += fmt.Sprintf("*:*:*:%s:%s\n", replicationUser, pgpassEscape(pw))
	if err := os.WriteFile(c.passFile(), []byte(line), 0o600); err != nil {
		return fmt.Errorf("failed to write the password file: %w", err)
	}
	return nil
}

// ImportSource is the server bootstrap.import reads. The password comes
// from the environment (instanceapi.EnvImportPassword), never a flag.
type ImportSource struct {
	Host      string
	Port      int
	User      string
	Password  string
	Databases []string
	Roles     bool
}

// writeConfig writes the managed configuration into dir, streaming from
// the lease's holder as last seen.
func (m *Manager) writeConfig(dir string) error {
	m.conf.mu.Lock()
	defer m.conf.mu.Unlock()
	return m.cfg.writeConfig(dir, m.role(), m.holderName(), m.conf.floors)
}

// writeFileAtomic replaces path with content in one rename, so that a
// reader (postgres at a reload) never sees half of it.
func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to replace %s: %w", filepath.Base(path), err)
	}
	return nil
}

// pgpassEscape escapes a field of the password file.
func pgpassEscape(s string) string { return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s) }
