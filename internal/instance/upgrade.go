package instance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
)

// A major upgrade in place, on the primary, before its server starts:
//
//  1. the old programs come from a bundle the old image's init container
//     wrote (cfg.UpgradeFrom, see upgrade.Bundle);
//  2. the old cluster is shut down cleanly (crash recovery first if it was
//     not), then pg_upgrade --check, then pg_upgrade in copy mode into a
//     sibling directory: the old directory is only read;
//  3. the directories swap (the old one stays as <pgdata>.<old major>) and
//     the new server must start with the managed configuration and answer
//     within UpgradeDeadline;
//  4. any failure before the new server first serves puts the old
//     directory back as it was and ends the instance with an UpgradeFailed
//     termination message: the operator rolls the image back;
//  5. once the new primary serves, ANALYZE in stages and the extension
//     updates pg_upgrade asks for run, and the old directory goes (from
//     then on writes land on the new version, and the old data is stale).

// upgradedMark in a data directory names the old directory kept beside it
// until the new version first serves.
const upgradedMark = "daytwo-upgraded-from"

// updateExtensionsFile is pg_upgrade's update_extensions.sql, kept in the
// data directory until the new primary runs it.
const updateExtensionsFile = "daytwo-update-extensions.sql"

func (c *Config) oldData(major string) string { return filepath.Clean(c.PGData) + "." + major }
func (c *Config) upgrading() string           { return filepath.Clean(c.PGData) + ".upgrading" }

// UpgradeOnly upgrades the data directory, if it is of an older major,
// and returns without starting a server: the operator's upgrade Job runs
// it while every instance is stopped. Run again after a success, it finds
// nothing to do.
func (m *Manager) UpgradeOnly(ctx context.Context) error {
	// The data directory's configuration serves TLS, so every server
	// pg_upgrade starts needs the certificate installed.
	if err := m.cfg.prepareRunDir(); err != nil {
		return err
	}
	if !hasData(m.cfg.PGData) {
		return fmt.Errorf("%s: %s holds no data directory", instanceapi.TerminationUpgradeFailed, m.cfg.PGData)
	}
	return m.upgradeIfOlder(ctx)
}

// otherMajor is true when the data directory is of a major version other
// than this image's programs, both known.
func (m *Manager) otherMajor(ctx context.Context) bool {
	data, err := upgrade.DataMajor(m.cfg.PGData)
	if err != nil {
		return false
	}
	bin, err := upgrade.BinaryMajor(ctx, m.cfg.BinDir)
	return err == nil && data != bin
}

// upgradeFailed is the permanent error of a failed upgrade, the old data
// back in place.
func upgradeFailed(format string, args ...any) error {
	return permanentError{fmt.Errorf(instanceapi.TerminationUpgradeFailed+": "+format, args...)}
}

// upgradeIfOlder upgrades the primary's data when it is of an older major
// than this image's programs. Nothing happens for data of this major.
func (m *Manager) upgradeIfOlder(ctx context.Context) error {
	from, err := upgrade.DataMajor(m.cfg.PGData)
	if err != nil {
		return err
	}
	to, err := upgrade.BinaryMajor(ctx, m.cfg.BinDir)
	if err != nil {
		return err
	}
	if from == to {
		// An upgrade killed mid-copy left its directory: it holds a second
		// copy of the data and nothing else needs it.
		if fileExists(m.cfg.upgrading()) {
			m.log.Info("Removing an interrupted upgrade's directory", "dir", m.cfg.upgrading())
			if err := os.RemoveAll(m.cfg.upgrading()); err != nil {
				return err
			}
		}
		return nil
	}
	if reverted, err := m.revertUnserved(from, to); err != nil || reverted {
		return err
	}
	if a, b := atoi(from), atoi(to); a > b || a == 0 {
		return permanentError{fmt.Errorf("the data directory is PostgreSQL %s but this image runs PostgreSQL %s: "+
			"PostgreSQL cannot go down a major version", from, to)}
	}
	if m.cfg.UpgradeFrom == "" {
		return permanentError{fmt.Errorf("the data directory is PostgreSQL %s but this image runs PostgreSQL %s, "+
			"and no PostgreSQL %s programs were given to upgrade it (--%s)", from, to, from, instanceapi.FlagUpgradeFrom)}
	}
	oldBin := filepath.Join(m.cfg.UpgradeFrom, "root/usr/lib/postgresql", from, "bin")
	if got, err := upgrade.BinaryMajor(ctx, oldBin); err != nil || got != from {
		return upgradeFailed("the old programs in %s are not PostgreSQL %s (%v)", m.cfg.UpgradeFrom, from, err)
	}
	if fileExists(m.cfg.oldData(from)) {
		// An earlier upgrade swapped and left the old directory, yet the
		// data is the old major again: never guess which copy is good.
		return upgradeFailed("both %s and %s hold PostgreSQL %s data; move one away by hand", m.cfg.PGData, m.cfg.oldData(from), from)
	}
	start := time.Now()
	m.setMessage(fmt.Sprintf("upgrading PostgreSQL %s to %s", from, to))
	m.log.Info("Upgrading the data directory", "from", from, "to", to)
	if err := m.shutDownCleanly(ctx, oldBin); err != nil {
		return upgradeFailed("%v", err)
	}
	work := filepath.Join(m.cfg.RunDir, "upgrade")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	if err := os.RemoveAll(m.cfg.upgrading()); err != nil {
		return fmt.Errorf("failed to remove an interrupted upgrade: %w", err)
	}
	// pg_upgrade needs the directory, where the image may only set $PATH.
	newBin := m.cfg.BinDir
	if newBin == "" {
		path, err := exec.LookPath("pg_upgrade")
		if err != nil {
			return upgradeFailed("this image has no pg_upgrade: %v", err)
		}
		newBin = filepath.Dir(path)
	}
	if err := enoughSpace(m.cfg.PGData); err != nil {
		return upgradeFailed("%v", err)
	}
	plan := upgrade.Plan{OldBin: oldBin, NewBin: newBin, OldData: m.cfg.PGData, NewData: m.cfg.upgrading(),
		WorkDir: work, Mode: upgrade.Copy, Jobs: 2, Port: m.cfg.Port + 1, InitdbArgs: []string{"--auth=trust"}}
	if err := upgrade.Check(ctx, plan); err != nil {
		return upgradeFailed("the check refused: %v", err)
	}
	res, err := upgrade.Run(ctx, plan)
	if err != nil {
		return upgradeFailed("%v", err)
	}
	m.log.Info("pg_upgrade done", "took", res.Took.Round(time.Millisecond).String())
	if err := m.swapIn(from, res); err != nil {
		return err
	}
	if err := m.trialStart(ctx); err != nil {
		if rerr := m.revertUpgrade(from); rerr != nil {
			return fmt.Errorf("the new server did not start (%w), and putting the old data back failed: %w", err, rerr)
		}
		return upgradeFailed("PostgreSQL %s did not start on the upgraded data, so %s's data is back as it was: %v", to, from, err)
	}
	m.log.Info("Upgraded; the old data stays until the new server serves", "from", from, "to", to,
		"took", time.Since(start).Round(time.Millisecond).String(), "old", m.cfg.oldData(from))
	return nil
}

// trialStart starts the upgraded server with the managed configuration,
// on its socket only, and stops it: a setting the new version refuses, or
// a library it lacks, fails here, while the old data can still come back.
func (m *Manager) trialStart(ctx context.Context) error {
	if err := m.writeConfig(m.cfg.PGData); err != nil {
		return err
	}
	deadline := m.cfg.UpgradeDeadline
	if deadline <= 0 {
		deadline = 5 * time.Minute
	}
	logFile := filepath.Join(m.cfg.RunDir, "upgrade-start.log")
	opts := fmt.Sprintf("-c listen_addresses= -p %d -c archive_mode=off", m.cfg.Port+1)
	pgctl := m.cfg.bin("pg_ctl")
	out, err := exec.CommandContext(ctx, pgctl, "start", "-w", "-t", strconv.Itoa(int(deadline.Seconds())),
		"-D", m.cfg.PGData, "-o", opts, "-l", logFile).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(logFile)
		_ = exec.Command(pgctl, "stop", "-m", "immediate", "-D", m.cfg.PGData).Run()
		return fmt.Errorf("%s", strings.TrimSpace(postgres.LastLines(append(out, log...), 3)))
	}
	if out, err := exec.CommandContext(ctx, pgctl, "stop", "-w", "-m", "fast", "-D", m.cfg.PGData).CombinedOutput(); err != nil {
		return fmt.Errorf("stopping the trial server: %w: %s", err, postgres.LastLines(out, 3))
	}
	return nil
}

// afterUpgrade runs once the upgraded primary serves: it updates the
// extensions pg_upgrade listed, analyzes in stages (the statistics do not
// survive pg_upgrade; the first stage makes plans sane within seconds),
// and removes the old directory.
func (m *Manager) afterUpgrade(ctx context.Context) {
	markPath := filepath.Join(m.cfg.PGData, upgradedMark)
	b, err := os.ReadFile(markPath)
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	old, script := lines[0], ""
	if len(lines) > 1 {
		script = lines[1]
	}
	// From the first write on, the old data is stale: it goes before
	// anything else, so a later failure never brings it back.
	if err := os.RemoveAll(old); err != nil {
		m.log.Error(err, "Failed to remove the pre-upgrade data", "dir", old)
		return
	}
	if err := os.Remove(markPath); err != nil {
		m.log.Error(err, "Failed to remove the upgrade mark")
	}
	env := append(os.Environ(), "PGHOST="+m.cfg.RunDir, "PGPORT="+strconv.Itoa(m.cfg.Port), "PGUSER=postgres")
	if script != "" && fileExists(script) {
		cmd := exec.CommandContext(ctx, m.cfg.bin("psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-f", script)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			m.log.Error(errors.New(postgres.LastLines(out, 3)), "Failed to update the extensions pg_upgrade listed", "script", script)
			m.setMessage("the extensions pg_upgrade listed were not updated: " + postgres.LastLines(out, 1))
		} else {
			m.log.Info("Extensions updated after the upgrade")
			_ = os.Remove(script)
		}
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, m.cfg.bin("vacuumdb"), "--all", "--analyze-in-stages", "--jobs=2")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		m.log.Error(errors.New(postgres.LastLines(out, 3)), "ANALYZE after the upgrade failed")
		return
	}
	m.log.Info("Statistics rebuilt after the upgrade", "took", time.Since(start).Round(time.Millisecond).String())
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// enoughSpace refuses a copy-mode upgrade the volume cannot hold: the new
// cluster needs as much again as the data (the WAL aside, which pg_upgrade
// does not copy), and a tenth more for its own WAL and catalog.
func enoughSpace(pgdata string) error {
	var need int64
	err := filepath.WalkDir(pgdata, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "pg_wal" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				need += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("measuring the data: %w", err)
	}
	need += need / 10
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(filepath.Clean(pgdata)), &st); err != nil {
		return fmt.Errorf("reading the volume's free space: %w", err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("the volume has %d MiB free and a copy-mode upgrade needs %d MiB: grow spec.storage.size first",
			free>>20, need>>20)
	}
	return nil
}
