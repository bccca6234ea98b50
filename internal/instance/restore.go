package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/backup"
)

// restoreFromBackup builds a data directory from a backup in dir (the
// staging directory): initdb, a server that listens on the local socket
// only (no client can see a half-restored database), the roles and the
// application database, then the restore. dir becomes the data directory
// only after all of it succeeded (see bootstrap).
func (m *Manager) restoreFromBackup(ctx context.Context, dir string) error {
	return m.fillBehindLocalServer(ctx, dir, func() error {
		target := backup.Conn{Host: m.cfg.RunDir, Port: m.cfg.Port, User: "postgres", Database: m.cfg.Database}
		return m.restore(ctx, target, m.cfg.Owner)
	})
}

// fillBehindLocalServer makes dir a cluster with daytwo's roles and
// application database, served on the local socket only (no client can see
// it half filled), runs fill, and stops the server.
func (m *Manager) fillBehindLocalServer(ctx context.Context, dir string, fill func() error) (err error) {
	if err := m.initdb(ctx, dir); err != nil {
		return err
	}
	if err := m.writeConfig(dir); err != nil {
		return err
	}
	srv, err := m.startLocalOnly(ctx, dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.stopLocal(srv)) }()
	conn, err := m.waitLocal(ctx, time.Minute)
	if err != nil {
		return err
	}
	err = m.ensureRoles(ctx, conn)
	_ = conn.Close(ctx)
	if err != nil {
		return err
	}
	return fill()
}

// importFrom builds a data directory in dir (the staging directory) from a
// running PostgreSQL: initdb, a server on the local socket only, daytwo's
// roles and application database, then the source's roles and databases.
func (m *Manager) importFrom(ctx context.Context, dir string) error {
	return m.fillBehindLocalServer(ctx, dir, func() error {
		src := m.cfg.Import
		start := time.Now()
		err := backup.Import(ctx, backup.ImportOptions{
			Source:    backup.Conn{Host: src.Host, Port: src.Port, User: src.User, Password: src.Password, Database: "postgres"},
			Target:    backup.Conn{Host: m.cfg.RunDir, Port: m.cfg.Port, User: "postgres", Database: "postgres"},
			Databases: src.Databases, Roles: src.Roles, Owner: m.cfg.Owner, BinDir: m.cfg.BinDir,
			Progress: func(s string) {
				m.log.Info("Import", "step", s)
				m.setMessage(s)
			},
		})
		if err == nil {
			m.log.Info("Import complete", "databases", src.Databases, "took", time.Since(start).Round(time.Millisecond).String())
		}
		return err
	})
}

// localServer is postgres running on a data directory being bootstrapped,
// reachable on the local socket only.
type localServer struct {
	// exited receives the server's end, once.
	exited chan error
	// stderr keeps the end of what the server wrote, to explain its end.
	stderr *tailWriter
	cmd    *exec.Cmd
}

// startLocalOnly starts postgres on dir without TCP, with extra settings
// (name=value); stop it with stop.
func (m *Manager) startLocalOnly(ctx context.Context, dir string, settings ...string) (*localServer, error) {
	args := []string{"-D", dir, "-c", "listen_addresses="}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	srv := &localServer{exited: make(chan error, 1), stderr: &tailWriter{max: 4096}}
	srv.cmd = exec.CommandContext(ctx, m.cfg.bin("postgres"), args...)
	srv.cmd.Stdout, srv.cmd.Stderr = m.logs.writer(), io.MultiWriter(m.logs.writer(), srv.stderr)
	srv.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start postgres on the data being bootstrapped: %w", err)
	}
	go func() { srv.exited <- srv.cmd.Wait() }()
	return srv, nil
}

// stop shuts the server down fast (an immediate shutdown after
// ShutdownTimeout).
func (m *Manager) stopLocal(srv *localServer) error {
	_ = srv.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-srv.exited:
		return nil
	case <-time.After(m.cfg.ShutdownTimeout):
		_ = srv.cmd.Process.Signal(syscall.SIGQUIT)
		<-srv.exited
		return errors.New("postgres did not stop after the bootstrap")
	}
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = w.buf[over:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

func (m *Manager) waitLocal(ctx context.Context, timeout time.Duration) (*pgx.Conn, error) {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := pgx.Connect(cctx, m.localDSN())
		cancel()
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("postgres did not accept connections for the restore: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
