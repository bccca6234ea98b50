package instance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
)

// finishInterruptedSwap puts the pre-upgrade data back when an upgrade's
// directory swap (or its undoing) stopped between two renames: PGData is
// missing and exactly one <pgdata>.<major> holds a cluster. Without this,
// the next start would see no data and make an empty cluster while the
// real one waits beside it.
func (m *Manager) finishInterruptedSwap() error {
	if hasData(m.cfg.PGData) {
		return nil
	}
	matches, err := filepath.Glob(filepath.Clean(m.cfg.PGData) + ".[0-9]*")
	if err != nil {
		return err
	}
	var old []string
	for _, d := range matches {
		if atoi(strings.TrimPrefix(filepath.Ext(d), ".")) > 0 && hasData(d) {
			old = append(old, d)
		}
	}
	switch len(old) {
	case 0:
		return nil
	case 1:
	default:
		return permanentError{fmt.Errorf("%s is missing and several pre-upgrade directories exist (%s): move the right one into place by hand",
			m.cfg.PGData, strings.Join(old, ", "))}
	}
	m.log.Info("Putting the pre-upgrade data back: an upgrade's directory swap was interrupted", "dir", old[0])
	if err := os.RemoveAll(m.cfg.PGData); err != nil {
		return err
	}
	if err := os.Rename(old[0], m.cfg.PGData); err != nil {
		return fmt.Errorf("failed to put %s back: %w", old[0], err)
	}
	for _, left := range []string{m.cfg.upgrading(), filepath.Clean(m.cfg.PGData) + ".failed"} {
		if err := os.RemoveAll(left); err != nil {
			return err
		}
	}
	return syncDir(filepath.Dir(m.cfg.PGData))
}

// revertUnserved puts the pre-upgrade data back when an upgrade swapped the
// directories and was killed before its new server ever served (SIGKILL,
// node loss: nothing ran revertUpgrade), and this image is the old
// version again (the operator rolled back). The mark proves the new data
// never served, so the old data is still the latest.
func (m *Manager) revertUnserved(dataMajor, binMajor string) (bool, error) {
	if atoi(dataMajor) <= atoi(binMajor) || !fileExists(filepath.Join(m.cfg.PGData, upgradedMark)) {
		return false, nil
	}
	old := m.cfg.oldData(binMajor)
	if v, err := upgrade.DataMajor(old); err != nil || v != binMajor {
		return false, nil //nolint:nilerr // no usable old data: nothing to put back
	}
	m.log.Info("Putting the pre-upgrade data back: the upgraded data never served and this image runs the old version",
		"upgraded", dataMajor, "old", binMajor)
	if err := m.revertUpgrade(binMajor); err != nil {
		return false, fmt.Errorf("failed to put the pre-upgrade data back: %w", err)
	}
	return true, nil
}

// shutDownCleanly leaves the old cluster shut down cleanly, as pg_upgrade
// needs: a cluster that crashed runs its recovery first, on its socket
// only and without archiving.
func (m *Manager) shutDownCleanly(ctx context.Context, oldBin string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(oldBin, "pg_controldata"), m.cfg.PGData)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pg_controldata: %w", err)
	}
	state := regexp.MustCompile(`(?m)^Database cluster state:\s+(.+)$`).FindSubmatch(out)
	if state != nil && string(state[1]) == "shut down" {
		return nil
	}
	m.log.Info("The old server did not shut down cleanly; running its recovery first")
	opts := fmt.Sprintf("-c listen_addresses= -c unix_socket_directories=%s -p %d -c archive_mode=off", m.cfg.RunDir, m.cfg.Port+1)
	pgctl := filepath.Join(oldBin, "pg_ctl")
	if out, err := exec.CommandContext(ctx, pgctl, "start", "-w", "-t", "600", "-D", m.cfg.PGData, "-o", opts,
		"-l", filepath.Join(m.cfg.RunDir, "recovery.log")).CombinedOutput(); err != nil {
		return fmt.Errorf("the old server's recovery: %w: %s", err, postgres.LastLines(out, 3))
	}
	if out, err := exec.CommandContext(ctx, pgctl, "stop", "-w", "-m", "fast", "-D", m.cfg.PGData).CombinedOutput(); err != nil {
		return fmt.Errorf("stopping the old server: %w: %s", err, postgres.LastLines(out, 3))
	}
	return nil
}

// swapIn puts the upgraded directory in PGData's place and keeps the old
// one beside it, with the identity and the mark that names it.
func (m *Manager) swapIn(from string, res upgrade.Result) error {
	if id, ok, err := readIdentity(m.cfg.PGData); err != nil {
		return err
	} else if ok {
		if err := writeIdentity(m.cfg.upgrading(), id); err != nil {
			return err
		}
	}
	// pg_upgrade wrote the extension script in its working directory,
	// which an upgrade Job's volume does not outlive: it moves into the data.
	script := ""
	if res.UpdateExtensions != "" {
		b, err := os.ReadFile(res.UpdateExtensions)
		if err != nil {
			return err
		}
		script = filepath.Join(m.cfg.PGData, updateExtensionsFile)
		if err := os.WriteFile(filepath.Join(m.cfg.upgrading(), updateExtensionsFile), b, 0o600); err != nil {
			return err
		}
	}
	mark := m.cfg.oldData(from) + "\n" + script + "\n"
	if err := os.WriteFile(filepath.Join(m.cfg.upgrading(), upgradedMark), []byte(mark), 0o600); err != nil {
		return err
	}
	if err := os.Rename(m.cfg.PGData, m.cfg.oldData(from)); err != nil {
		return fmt.Errorf("failed to move the old data aside: %w", err)
	}
	if err := os.Rename(m.cfg.upgrading(), m.cfg.PGData); err != nil {
		_ = os.Rename(m.cfg.oldData(from), m.cfg.PGData)
		return fmt.Errorf("failed to move the upgraded data into place: %w", err)
	}
	return syncDir(filepath.Dir(m.cfg.PGData))
}

// revertUpgrade puts the old directory back in PGData's place.
func (m *Manager) revertUpgrade(from string) error {
	failed := filepath.Clean(m.cfg.PGData) + ".failed"
	if err := os.RemoveAll(failed); err != nil {
		return err
	}
	if err := os.Rename(m.cfg.PGData, failed); err != nil {
		return err
	}
	if err := os.Rename(m.cfg.oldData(from), m.cfg.PGData); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(m.cfg.PGData)); err != nil {
		return err
	}
	return os.RemoveAll(failed)
}
