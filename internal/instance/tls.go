package instance

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// TLS: with Config.TLS the operator projects the server certificate, its
// key and the CA into SecretsDir. The instance manager installs private
// copies (postgres refuses a key others can read, and a projected file is
// group-readable) in RunDir/tls, serves them, and requires TLS of every
// network connection. Its own connections to other instances (clone,
// stream, rewind, slot commands) verify the server against the CA and the
// name it dials. A renewed certificate is installed and postgres reloaded,
// which re-reads it, with no restart.

func (c *Config) tlsDir() string { return filepath.Join(c.RunDir, "tls") }

// tlsFiles maps each projected file to its installed copy.
func (c *Config) tlsFiles() map[string]string {
	return map[string]string{
		instanceapi.SecretTLSCert: filepath.Join(c.tlsDir(), "server.crt"),
		instanceapi.SecretTLSKey:  filepath.Join(c.tlsDir(), "server.key"),
		instanceapi.SecretTLSCA:   filepath.Join(c.tlsDir(), "ca.crt"),
	}
}

// prepareRunDir creates RunDir and installs the TLS files in it: every
// server started on the data directory reads them, since its
// configuration serves TLS.
func (c *Config) prepareRunDir() error {
	if err := os.MkdirAll(c.RunDir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", c.RunDir, err)
	}
	_, err := c.installTLS()
	return err
}

// installTLS copies the projected TLS files into tlsDir when they differ
// from the installed ones, and says whether it did. A certificate that
// does not match its key is refused: the installed pair stays.
func (c *Config) installTLS() (bool, error) {
	if !c.TLS {
		return false, nil
	}
	read := map[string][]byte{}
	changed := false
	for name, installed := range c.tlsFiles() {
		b, err := os.ReadFile(filepath.Join(c.SecretsDir, name))
		if err != nil {
			return false, fmt.Errorf("failed to read the TLS file %s: %w", name, err)
		}
		read[name] = b
		if old, err := os.ReadFile(installed); err != nil || !bytes.Equal(old, b) {
			changed = true
		}
	}
	if !changed {
		return false, nil
	}
	if _, err := tls.X509KeyPair(read[instanceapi.SecretTLSCert], read[instanceapi.SecretTLSKey]); err != nil {
		return false, fmt.Errorf("the projected server certificate does not match its key: %w", err)
	}
	if err := os.MkdirAll(c.tlsDir(), 0o700); err != nil {
		return false, fmt.Errorf("failed to create %s: %w", c.tlsDir(), err)
	}
	for name, installed := range c.tlsFiles() {
		if err := writeFileAtomic(installed, string(read[name])); err != nil {
			return false, err
		}
	}
	return true, nil
}

// sslSettings are the postgresql.conf lines that serve TLS.
func (c *Config) sslSettings() string {
	if !c.TLS {
		return ""
	}
	f := c.tlsFiles()
	return fmt.Sprintf("ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\nssl_min_protocol_version = 'TLSv1.2'\n",
		f[instanceapi.SecretTLSCert], f[instanceapi.SecretTLSKey])
}

// sslParams are the connection parameters this instance connects to
// another with: verify the server's certificate and name. pgx parses them
// too, so they name no client certificate (pgx would load it); libpq
// programs get that from sslEnv, and the walreceiver from
// libpqClientParams.
func (c *Config) sslParams() string {
	if !c.TLS {
		return ""
	}
	return " sslmode=verify-full sslrootcert=" + c.tlsFiles()[instanceapi.SecretTLSCA]
}

// libpqClientParams, for a conninfo only libpq reads (primary_conninfo),
// say there is no client certificate.
func (c *Config) libpqClientParams() string {
	if !c.TLS {
		return ""
	}
	return fmt.Sprintf(" sslcert=%s sslkey=%s", c.noClientCert(), c.noClientCert())
}

// noClientCert is a file that never exists: libpq would otherwise look for
// a client certificate in $HOME/.postgresql, which may be unreadable.
func (c *Config) noClientCert() string { return filepath.Join(c.tlsDir(), "no-client-certificate") }

// sslEnv is sslParams for a libpq program (pg_basebackup).
func (c *Config) sslEnv() []string {
	if !c.TLS {
		return nil
	}
	return []string{"PGSSLMODE=verify-full", "PGSSLROOTCERT=" + c.tlsFiles()[instanceapi.SecretTLSCA],
		"PGSSLCERT=" + c.noClientCert(), "PGSSLKEY=" + c.noClientCert()}
}

// refreshTLS installs a renewed certificate and has postgres reload it.
func (m *Manager) refreshTLS() {
	changed, err := m.cfg.installTLS()
	if err != nil {
		m.log.Error(err, "Failed to install the renewed TLS certificate; serving the previous one")
		return
	}
	if changed {
		m.log.Info("Installed a renewed TLS certificate; reloading")
		m.Reload()
	}
}

// apiTLSConfig serves the instance API over HTTPS with the projected
// server certificate, verifying a client certificate against the
// Database's daytwo CA when one is presented (pki.ReloadingServerConfig).
func (c *Config) apiTLSConfig() *tls.Config {
	return pki.ReloadingServerConfig(filepath.Join(c.SecretsDir, instanceapi.SecretTLSCert),
		filepath.Join(c.SecretsDir, instanceapi.SecretTLSKey), filepath.Join(c.SecretsDir, instanceapi.SecretAPIClientCA))
}

// withClientCertificate answers 401 to a call without a verified client
// certificate, when the API serves TLS.
func (m *Manager) withClientCertificate(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if m.cfg.TLS && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeJSON(w, http.StatusUnauthorized, instanceapi.Error{Message: "a client certificate from the Database's CA is required"})
			return
		}
		h(w, r)
	}
}
