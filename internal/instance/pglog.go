package instance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PostgreSQL's log joins the instance manager's JSON stream. The supervised
// server runs a logging collector with log_destination jsonlog, writing
// into two named pipes in the private run directory that the manager holds
// open for reading and writing (so a start never blocks on them and a read
// never ends): postgres.json gets one JSON record per message, which the
// manager wraps as a line of its own stream (level, ts, logger "postgres",
// msg, and PostgreSQL's record as it is); postgres gets whatever a child
// process writes to stderr (an archive or restore command's own JSON lines,
// say), and the server's own stderr gets what the postmaster says before
// the collector starts. Those pass through when they are JSON objects and
// are wrapped when not. The settings are the supervised server's command
// line only: every other server (pg_upgrade's, a trial or local start)
// reads postgresql.conf and logs to its stderr as before.
const (
	logDirName  = "log"
	logFileName = "postgres"
	// maxLogLine bounds one line kept in memory; the rest of a longer one
	// is dropped, and the relay goes on: a relay that stopped reading
	// would stop every backend that logs.
	maxLogLine = 1 << 20
)

// collectorArgs are the supervised server's logging settings. jsonlog
// came with PostgreSQL 15: an older server logs to its stderr, whose lines
// are wrapped.
func (c *Config) collectorArgs() []string {
	b, err := os.ReadFile(filepath.Join(c.PGData, "PG_VERSION"))
	if major, perr := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || perr != nil || major < 15 {
		return nil
	}
	return []string{"-c", "logging_collector=on", "-c", "log_destination=jsonlog",
		"-c", "log_directory=" + filepath.Join(c.RunDir, logDirName), "-c", "log_filename=" + logFileName,
		"-c", "log_rotation_age=0", "-c", "log_rotation_size=0", "-c", "log_file_mode=0600"}
}

// logRelay writes PostgreSQL's lines into the manager's stream, one whole
// line per write.
type logRelay struct {
	mu  sync.Mutex
	out io.Writer
	// pipes are made and read once per manager, on the first start.
	once sync.Once
	err  error
}

// startPipes makes the collector's named pipes and starts reading them.
func (l *logRelay) startPipes(dir string) error {
	l.once.Do(func() {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			l.err = err
			return
		}
		for name, jsonlog := range map[string]bool{logFileName: false, logFileName + ".json": true} {
			path := filepath.Join(dir, name)
			if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe == 0 {
				// Not a pipe (a file some earlier run left): the collector
				// would append to it for ever.
				if err := os.Remove(path); err != nil {
					l.err = err
					return
				}
			}
			if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
				l.err = fmt.Errorf("failed to make the log pipe %s: %w", path, err)
				return
			}
			// Read and write: the open does not wait for a writer, and the
			// pipe never reads EOF when the collector restarts.
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				l.err = fmt.Errorf("failed to open the log pipe %s: %w", path, err)
				return
			}
			go func() {
				// Never ends: the pipe is open for writing here too.
				l.relay(f, jsonlog)
				_ = f.Close()
			}()
		}
	})
	return l.err
}

// stderr is a pipe whose lines join the stream: give its write end to a
// server as its stderr, and close it here once the server started.
func (l *logRelay) stderr() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		l.relay(r, false)
		_ = r.Close()
	}()
	return w, nil
}

// writer is an io.Writer whose lines join the stream, for one output of a
// server whose outputs exec copies (a local server, whose end is explained
// from its stderr too): one writer per output, as exec copies each on its
// own goroutine.
func (l *logRelay) writer() io.Writer { return &lineWriter{l: l} }

type lineWriter struct {
	l   *logRelay
	buf []byte
	// skip drops the rest of a line cut at maxLogLine.
	skip bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !w.skip {
				w.buf = append(w.buf, p...)
			}
			if len(w.buf) > maxLogLine {
				w.l.write(w.buf[:maxLogLine], false)
				w.buf, w.skip = w.buf[:0], true
			}
			break
		}
		if !w.skip {
			w.buf = append(w.buf, p[:i]...)
			w.l.write(w.buf[:min(len(w.buf), maxLogLine)], false)
		}
		w.buf, w.skip, p = w.buf[:0], false, p[i+1:]
	}
	return n, nil
}

// relay copies r's lines until r ends.
func (l *logRelay) relay(r io.Reader, jsonlog bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	cut := false
	for {
		chunk, isPrefix, err := br.ReadLine()
		if cut = cut || len(line)+len(chunk) > maxLogLine; !cut {
			line = append(line, chunk...)
		}
		if err != nil {
			if len(line) > 0 {
				l.write(line, jsonlog)
			}
			return
		}
		if !isPrefix {
			l.write(line, jsonlog)
			line, cut = line[:0], false
		}
	}
}

func (l *logRelay) write(line []byte, jsonlog bool) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	out := formatLogLine(line, jsonlog, time.Now())
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.out.Write(out)
}

// pgRecord is what the wrapping line takes from a jsonlog record.
type pgRecord struct {
	Severity string `json:"error_severity"`
	Message  string `json:"message"`
}

// logLine is one line of the manager's stream, as zap writes its own.
type logLine struct {
	Level  string          `json:"level"`
	TS     string          `json:"ts"`
	Logger string          `json:"logger"`
	Msg    string          `json:"msg"`
	Record json.RawMessage `json:"record,omitempty"`
}

// formatLogLine is line as a line of the stream: a jsonlog record wrapped
// with its level and message, a JSON object as it is, anything else
// wrapped as an info message.
func formatLogLine(line []byte, jsonlog bool, now time.Time) []byte {
	ll := logLine{Level: "info", TS: now.UTC().Format(time.RFC3339Nano), Logger: "postgres", Msg: string(line)}
	var rec pgRecord
	switch {
	case jsonlog && json.Unmarshal(line, &rec) == nil:
		ll.Level, ll.Msg, ll.Record = levelOf(rec.Severity), rec.Message, line
	case json.Valid(line) && bytes.TrimSpace(line)[0] == '{':
		return append(line, '\n')
	}
	b, err := json.Marshal(ll)
	if err != nil {
		return append(line, '\n')
	}
	return append(b, '\n')
}

// levelOf is a PostgreSQL severity as a zap level.
func levelOf(severity string) string {
	switch severity {
	case "DEBUG": // jsonlog's name for DEBUG1 to DEBUG5
		return "debug"
	case "WARNING":
		return "warn"
	case "ERROR", "FATAL", "PANIC":
		return "error"
	}
	return "info" // LOG, INFO, NOTICE
}
