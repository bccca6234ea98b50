package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
func (m *Manager) restoreFromBackup(ctx context.Context, dir string) (err error) {
	if err := m.initdb(ctx, dir); err != nil {
		return err
	}
	if err := m.writeConfig(dir); err != nil {
		return err
	}
	stop, err := m.startLocalOnly(ctx, dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	conn, err := m.waitLocal(ctx, time.Minute)
	if err != nil {
		return err
	}
	err = m.ensureRoles(ctx, conn)
	_ = conn.Close(ctx)
	if err != nil {
		return err
	}
	target := backup.Conn{Host: m.cfg.RunDir, Port: m.cfg.Port, User: "postgres", Database: m.cfg.Database}
	return m.restore(ctx, target, m.cfg.Owner)
}

// startLocalOnly starts postgres on dir without TCP and returns how to stop it.
func (m *Manager) startLocalOnly(ctx context.Context, dir string) (func() error, error) {
	cmd := exec.CommandContext(ctx, m.cfg.bin("postgres"), "-D", dir, "-c", "listen_addresses=")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start postgres for the restore: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return func() error {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
			return nil
		case <-time.After(m.cfg.ShutdownTimeout):
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			<-exited
			return errors.New("postgres did not stop after the restore")
		}
	}, nil
}

func (m *Manager) waitLocal(ctx context.Context, timeout time.Duration) (*pgx.Conn, error) {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := pgx.Connect(cctx, m.localDSN("postgres"))
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
