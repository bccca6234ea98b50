// Package upgrade moves one PostgreSQL data directory to a newer major
// version with pg_upgrade, in a way that can always go back.
//
// The new cluster is made beside the old one (initdb with the old one's
// encoding, locale and checksums), and pg_upgrade copies or clones the
// data files into it: the old directory is only read, so a failure at any
// step, before or after pg_upgrade changed files, is undone by deleting the
// new directory. Swapping the directories, starting the new server and
// deciding it is healthy are the caller's; until it decides, the old
// directory stays, and going back is starting the old binaries on it.
//
// Link mode (hard links, no copy) is not offered: once the new server
// starts, the old directory's files are the new server's, and nothing
// short of a snapshot brings the old version back.
package upgrade

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// Mode is how pg_upgrade moves the data files.
type Mode string

const (
	// Copy copies every file: the upgrade needs as much free space again as
	// the data, and time in proportion to it.
	Copy Mode = "copy"
	// Clone uses the file system's copy-on-write clones (XFS with reflink,
	// Btrfs): as fast as links and as safe as a copy. pg_upgrade --check
	// refuses it where the file system cannot.
	Clone Mode = "clone"
)

// Plan is one upgrade.
type Plan struct {
	// OldBin and NewBin are the directories of the two versions' programs.
	OldBin, NewBin string
	// OldData is the old version's data directory, cleanly shut down.
	OldData string
	// NewData is where the new cluster is made; it must not exist.
	NewData string
	// WorkDir is pg_upgrade's working directory and socket directory: a
	// short private path (a Unix socket path is limited to 107 bytes).
	WorkDir string
	Mode    Mode
	// Jobs is pg_upgrade's parallelism (--jobs); 0 means 1.
	Jobs int
	// Port is the port both servers listen on while pg_upgrade runs them,
	// on WorkDir's socket only; 0 means pg_upgrade's default (50432).
	Port int
	// InitdbArgs are the options the old cluster was made with, except the
	// superuser (always postgres) and the checksums (read from OldData).
	InitdbArgs []string
	// Env is added to the programs' environment (PGPASSWORD when the old
	// cluster's local connections need one).
	Env []string
	// SysProcAttr runs the programs as another user (tests run as root).
	SysProcAttr *syscall.SysProcAttr
}

// Result is what a successful upgrade leaves behind.
type Result struct {
	// Took is pg_upgrade's own time, initdb excluded.
	Took time.Duration
	// UpdateExtensions is the SQL script pg_upgrade wrote when extensions
	// need ALTER EXTENSION ... UPDATE on the new version; empty when none do.
	UpdateExtensions string
}

// Error is a failed step with the programs' own words.
type Error struct {
	Step   string // "initdb", "check", "upgrade"
	Detail string // pg_upgrade's explanation, and the problem list it names
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("pg_upgrade %s failed: %s", e.Step, e.Detail)
}

func (e *Error) Unwrap() error { return e.Err }

// Check runs pg_upgrade --check against a new cluster made for the check
// and removed after it: nothing of the old cluster changes, whatever the
// outcome. A failed check is an *Error whose Detail says why.
func Check(ctx context.Context, p Plan) error {
	if err := p.initNew(ctx); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(p.NewData) }()
	return p.pgUpgrade(ctx, "check", "--check")
}

// Run upgrades: a new cluster in NewData holding the old one's data. On
// any failure NewData is removed and OldData is as it was.
func Run(ctx context.Context, p Plan) (Result, error) {
	if p.Mode != Copy && p.Mode != Clone {
		return Result{}, fmt.Errorf("upgrade mode %q: must be %q or %q", p.Mode, Copy, Clone)
	}
	if err := p.initNew(ctx); err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := p.pgUpgrade(ctx, "upgrade", "--"+string(p.Mode)); err != nil {
		_ = os.RemoveAll(p.NewData)
		return Result{}, err
	}
	res := Result{Took: time.Since(start)}
	if script := filepath.Join(p.WorkDir, "update_extensions.sql"); fileExists(script) {
		res.UpdateExtensions = script
	}
	return res, nil
}

// initNew makes the new cluster with the old one's options.
func (p Plan) initNew(ctx context.Context) error {
	if fileExists(p.NewData) {
		return fmt.Errorf("the new data directory %s exists: a failed upgrade left it, or it is in use", p.NewData)
	}
	checksums, err := p.oldChecksums(ctx)
	if err != nil {
		return &Error{Step: "initdb", Detail: err.Error(), Err: err}
	}
	args := append([]string{"-D", p.NewData, "--username=postgres"}, p.InitdbArgs...)
	if checksums {
		args = append(args, "--data-checksums")
	} else if major, _ := BinaryMajor(ctx, p.NewBin); atoi(major) >= 18 {
		// 18 checksums by default; pg_upgrade needs both sides alike.
		args = append(args, "--no-data-checksums")
	}
	if out, err := p.command(ctx, p.NewBin, "initdb", args...).CombinedOutput(); err != nil {
		_ = os.RemoveAll(p.NewData)
		return &Error{Step: "initdb", Detail: postgres.LastLines(out, 5), Err: err}
	}
	return nil
}

// oldChecksums reads from pg_controldata whether the old cluster has data
// checksums.
func (p Plan) oldChecksums(ctx context.Context) (bool, error) {
	cmd := p.command(ctx, p.OldBin, "pg_controldata", p.OldData)
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		return false, fmt.Errorf("pg_controldata %s: %w", p.OldData, err)
	}
	m := regexp.MustCompile(`(?m)^Data page checksum version:\s+(\d+)`).FindSubmatch(out)
	if m == nil {
		return false, fmt.Errorf("pg_controldata %s printed no checksum version", p.OldData)
	}
	return string(m[1]) != "0", nil
}

// pgUpgrade runs pg_upgrade with extra; a failure's Detail is its
// explanation and the start of the problem list it points to.
func (p Plan) pgUpgrade(ctx context.Context, step string, extra ...string) error {
	args := []string{"--old-bindir", p.OldBin, "--new-bindir", p.NewBin, "--old-datadir", p.OldData,
		"--new-datadir", p.NewData, "--username=postgres", "--socketdir", p.WorkDir, "--jobs", strconv.Itoa(max(p.Jobs, 1))}
	if p.Port > 0 {
		args = append(args, "--old-port", strconv.Itoa(p.Port), "--new-port", strconv.Itoa(p.Port))
	}
	cmd := p.command(ctx, p.NewBin, "pg_upgrade", append(args, extra...)...)
	cmd.Dir = p.WorkDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &Error{Step: step, Detail: explain(out), Err: err}
	}
	return nil
}

func (p Plan) command(ctx context.Context, bin, prog string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, prog), args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = p.SysProcAttr
	return cmd
}

// explain keeps what a user needs of pg_upgrade's output: the step that
// failed and its explanation, the first lines of the file of problems it
// names (tables and columns, never row data), and the end of the log it
// says to consult. It runs before a failed upgrade's directory is removed.
func explain(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	first := -1
	for i, l := range lines {
		f := strings.TrimSpace(l)
		if strings.HasSuffix(f, "fatal") || strings.Contains(f, "failed check") || f == "*failure*" {
			first = i
			break
		}
	}
	from, to := max(len(lines)-6, 0), len(lines)
	if first >= 0 {
		from, to = first, min(first+12, len(lines))
	}
	var kept []string
	for _, l := range lines[from:to] {
		if strings.TrimSpace(l) != "Failure, exiting" {
			kept = append(kept, l)
		}
	}
	detail := squeeze(strings.Join(kept, "\n"))
	for _, l := range lines {
		f := strings.TrimSpace(l)
		if strings.HasPrefix(f, "/") && strings.HasSuffix(f, ".txt") && fileExists(f) {
			detail += " | " + filepath.Base(f) + ": " + squeeze(head(f, 5))
			break
		}
	}
	// A failure inside a step names its log; the first one is the cause
	// (the others are the parallel jobs it stopped).
	if m := consultRE.FindSubmatch(out); m != nil {
		if why := logError(readOrNil(string(m[1]))); why != "" {
			// The log goes with the failed directory: its words replace the pointer.
			detail = strings.TrimSpace(consultSentenceRE.ReplaceAllString(detail, ""))
			detail += " | " + filepath.Base(string(m[1])) + ": " + why
		}
	}
	return detail
}

// logError is the error a pg_upgrade step's log ends with: from its first
// "error:" line (pg_restore's, with the command it ran), or its last lines.
func logError(log []byte) string {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	for i, l := range lines {
		if strings.Contains(l, "error:") {
			return squeeze(strings.Join(lines[i:min(i+3, len(lines))], "\n"))
		}
	}
	return squeeze(postgres.LastLines(log, 5))
}

var (
	consultRE         = regexp.MustCompile(`Consult the last few lines of "([^"]+)"`)
	consultSentenceRE = regexp.MustCompile(`Consult the last few lines of "[^"]+" for the probable cause of the failure\.`)
)

func readOrNil(path string) []byte {
	data, _ := os.ReadFile(path)
	return data
}

// squeeze joins lines and runs of blanks into one line.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

// head is the first n lines of the file at path.
func head(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var b bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	for i := 0; i < n && sc.Scan(); i++ {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

// BinaryMajor is the major version of the postgres in binDir ("17").
func BinaryMajor(ctx context.Context, binDir string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("failed to run postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 17.12 (Debian 17.12-0+deb13u1)"
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return "", errors.New("postgres --version printed " + strings.TrimSpace(string(out)))
	}
	v, _, _ := strings.Cut(f[2], ".")
	return v, nil
}

// DataMajor is the major version that made the data directory dir.
func DataMajor(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "PG_VERSION"))
	if err != nil {
		return "", fmt.Errorf("failed to read PG_VERSION: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
