package pooler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// secretsPoll is how often the projected Secrets are compared with what
// PgBouncer runs with; a change reloads it.
const secretsPoll = 10 * time.Second

// shutdownWait bounds PgBouncer's safe shutdown (transactions under way
// finish) when the pod stops; then it is killed.
const shutdownWait = 20 * time.Second

// Manager runs one PgBouncer.
type Manager struct {
	cfg Config
	log logr.Logger
	// adminPassword is the console user's, made at start.
	adminPassword string
	// console serializes the console commands a switchover sends (a
	// pause and its resume must not interleave with another's), and
	// guards unpause.
	console sync.Mutex
	// unpause resumes a pause whose resume never came (maxPause); pauses
	// counts the pauses, so a timer of an earlier one resumes nothing.
	unpause *time.Timer
	pauses  int
}

// maxPause is the longest a pause lasts: an operator that paused and
// then lost the pod (a crash, a partition) must not leave its clients
// waiting for good.
const maxPause = 30 * time.Second

// New prepares a manager; Run starts PgBouncer.
func New(cfg Config, log logr.Logger) (*Manager, error) {
	pw, err := postgres.Password()
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, log: log, adminPassword: pw}, nil
}

// Run writes PgBouncer's files, runs it, serves the API and metrics, and
// reloads PgBouncer when the projected Secrets change, until ctx ends
// (PgBouncer is then shut down safely) or PgBouncer exits.
func (m *Manager) Run(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.RunDir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", m.cfg.RunDir, err)
	}
	seen, err := m.writeFiles()
	if err != nil {
		return err
	}
	cmd := exec.Command(m.cfg.Program, m.cfg.iniPath())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: m.cfg.Credential}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start pgbouncer: %w", err)
	}
	m.log.Info("Started pgbouncer", "target", m.cfg.Target, "poolMode", m.cfg.PoolMode)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	if m.cfg.APIAddr != "" {
		tlsConfig := pki.ReloadingServerConfig(m.cfg.secret(SecretTLSCert), m.cfg.secret(SecretTLSKey), m.cfg.secret(SecretClientCA))
		_, stop, err := instanceapi.Serve(m.cfg.APIAddr, m.Handler(), tlsConfig)
		if err != nil {
			_ = cmd.Process.Kill()
			return err
		}
		stops = append(stops, stop)
	}
	if m.cfg.MetricsAddr != "" {
		_, stop, err := instanceapi.Serve(m.cfg.MetricsAddr, m.metricsHandler(), nil)
		if err != nil {
			_ = cmd.Process.Kill()
			return err
		}
		stops = append(stops, stop)
	}
	tick := time.NewTicker(secretsPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("pgbouncer exited: %w", err)
		case <-ctx.Done():
			// SIGINT is PgBouncer's safe shutdown: it waits for the
			// transactions under way, then exits.
			m.log.Info("Stopping pgbouncer (safe shutdown)")
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(shutdownWait):
				_ = cmd.Process.Kill()
				<-exited
			}
			return nil
		case <-tick.C:
			now, err := m.secretsHash()
			if err != nil || bytes.Equal(now, seen) {
				continue
			}
			if seen, err = m.writeFiles(); err != nil {
				m.log.Error(err, "Failed to write pgbouncer's files; it keeps the last ones")
				continue
			}
			m.log.Info("Reloading pgbouncer: a projected Secret changed")
			_ = cmd.Process.Signal(syscall.SIGHUP)
		}
	}
}

// secretsHash sums the projected files PgBouncer reads.
func (m *Manager) secretsHash() ([]byte, error) {
	h := sha256.New()
	for _, name := range []string{SecretAuthPassword, SecretTLSCert, SecretTLSKey, SecretServerCA} {
		b, err := os.ReadFile(m.cfg.secret(name))
		if err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", name, err)
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	return h.Sum(nil), nil
}

// writeFiles writes pgbouncer.ini and the auth file, and returns the
// hash of the Secrets they were written from.
func (m *Manager) writeFiles() ([]byte, error) {
	sum, err := m.secretsHash()
	if err != nil {
		return nil, err
	}
	pw, err := os.ReadFile(m.cfg.secret(SecretAuthPassword))
	if err != nil {
		return nil, err
	}
	for path, content := range map[string]string{
		m.cfg.iniPath():      m.cfg.ini(),
		m.cfg.userlistPath(): userlist(strings.TrimSpace(string(pw)), m.adminPassword),
		m.cfg.hbaPath():      hba,
	} {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			return nil, fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
		}
		if c := m.cfg.Credential; c != nil {
			if err := os.Chown(tmp, int(c.Uid), int(c.Gid)); err != nil {
				return nil, err
			}
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
		}
	}
	return sum, nil
}

// consoleConn connects to PgBouncer's console over its socket.
func (m *Manager) consoleConn(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=pgbouncer sslmode=disable", m.cfg.RunDir, m.cfg.ListenPort, adminUser))
	if err != nil {
		return nil, err
	}
	cfg.Password = m.adminPassword
	// The console speaks the simple query protocol only.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

// command runs console commands in order on one connection.
func (m *Manager) command(ctx context.Context, cmds ...string) error {
	conn, err := m.consoleConn(ctx)
	if err != nil {
		return fmt.Errorf("pgbouncer's console: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, c := range cmds {
		if _, err := conn.Exec(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	return nil
}

// Pause pauses every pool, waiting up to timeout for the transactions
// under way; one that does not finish in time resumes the pools.
func (m *Manager) Pause(ctx context.Context, timeout time.Duration) error {
	m.console.Lock()
	defer m.console.Unlock()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := m.command(pctx, "PAUSE")
	if err == nil || strings.Contains(err.Error(), "already") {
		// Paused (again): whatever resumes it, the longest pause counts
		// from now.
		m.log.Info("Paused pgbouncer")
		m.armResume(maxPause)
		return nil
	}
	// The console answers PAUSE once paused; a connection closed before
	// that leaves PgBouncer pausing, so it is told to resume, and
	// resumes by itself should that fail too.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if rerr := m.command(rctx, "RESUME"); rerr != nil && !strings.Contains(rerr.Error(), "not paused") {
		err = errors.Join(err, rerr)
		m.armResume(time.Second)
	}
	return fmt.Errorf("the pause did not complete within %s: %w", timeout, err)
}

// armResume makes the current pause resume by itself after d (m.console
// held): a newer pause replaces the timer, and the count keeps an older
// one that fires anyway from resuming it.
func (m *Manager) armResume(d time.Duration) {
	if m.unpause != nil {
		m.unpause.Stop()
	}
	m.pauses++
	pause := m.pauses
	m.unpause = time.AfterFunc(d, func() { m.resumeStale(pause) })
}

// resumeStale resumes pause number pause when no resume came for it,
// trying until PgBouncer answers (a pool left paused holds every client).
func (m *Manager) resumeStale(pause int) {
	for attempt := 0; ; attempt++ {
		m.console.Lock()
		if m.pauses != pause || m.unpause == nil {
			m.console.Unlock()
			return // resumed, or paused again since
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := m.command(ctx, "RECONNECT", "RESUME")
		cancel()
		if err == nil || strings.Contains(err.Error(), "not paused") {
			m.unpause = nil
			m.console.Unlock()
			m.log.Info("Resumed pgbouncer by itself: no resume came, or it failed")
			return
		}
		m.console.Unlock()
		if attempt%10 == 0 {
			m.log.Error(err, "Failed to resume pgbouncer; trying again")
		}
		time.Sleep(time.Second)
	}
}

// Resume closes every server connection as it comes back (they reach
// the old primary) and resumes the pools. A resume that fails leaves the
// pool to resume by itself within a second, and then again until it
// does.
func (m *Manager) Resume(ctx context.Context) error {
	m.console.Lock()
	defer m.console.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := m.command(rctx, "RECONNECT", "RESUME")
	if err != nil && strings.Contains(err.Error(), "not paused") {
		err = nil
	}
	if err != nil {
		m.armResume(time.Second)
		return err
	}
	if m.unpause != nil {
		m.unpause.Stop()
		m.unpause = nil
	}
	m.log.Info("Resumed pgbouncer")
	return nil
}

// Handler is the manager's API: the kubelet's probe, and the pause and
// resume the operator asks for with its client certificate.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+instanceapi.PathPoolerReady, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := m.command(ctx, "SHOW VERSION"); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
	})
	mux.HandleFunc("POST "+instanceapi.PathPoolerPause, withClientCertificate(func(w http.ResponseWriter, r *http.Request) {
		var req instanceapi.PoolerPauseRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Timeout <= 0 || req.Timeout > time.Minute {
			writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: "the body must be a pause request with a timeout of at most a minute"})
			return
		}
		if err := m.Pause(r.Context(), req.Timeout); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"paused": true})
	}))
	mux.HandleFunc("POST "+instanceapi.PathPoolerResume, withClientCertificate(func(w http.ResponseWriter, r *http.Request) {
		if err := m.Resume(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"paused": false})
	}))
	return mux
}

// withClientCertificate answers 401 to a call without a client
// certificate the Database's CA verified.
func withClientCertificate(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			writeJSON(w, http.StatusUnauthorized, instanceapi.Error{Message: "a client certificate from the Database's CA is required"})
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) { instanceapi.WriteJSON(w, code, v) }
