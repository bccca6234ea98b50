package instance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Each kind of line PostgreSQL's pipes carry, as it joins the stream.
func TestFormatLogLine(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	record := `{"timestamp":"2026-11-30 03:04:05.000 GMT","user":"app","error_severity":"%s","state_code":"22012","message":"division by zero"}`
	for _, c := range []struct {
		line    string
		jsonlog bool
		want    string
	}{
		{strings.ReplaceAll(record, "%s", "ERROR"), true, `{"level":"error","ts":"2026-11-30T03:04:05Z","logger":"postgres","msg":"division by zero","record":` + strings.ReplaceAll(record, "%s", "ERROR") + `}`},
		{strings.ReplaceAll(record, "%s", "WARNING"), true, `"level":"warn"`},
		{strings.ReplaceAll(record, "%s", "LOG"), true, `"level":"info"`},
		{strings.ReplaceAll(record, "%s", "DEBUG"), true, `"level":"debug"`},
		{strings.ReplaceAll(record, "%s", "PANIC"), true, `"level":"error"`},
		// A child's own JSON line passes as it is.
		{`{"level":"info","ts":"x","logger":"wal-push","msg":"pushed"}`, false, `{"level":"info","ts":"x","logger":"wal-push","msg":"pushed"}`},
		// What the postmaster says before the collector starts.
		{`2026-11-30 03:04:05.000 GMT [7] LOG:  redirecting log output to logging collector process`, false,
			`{"level":"info","ts":"2026-11-30T03:04:05Z","logger":"postgres","msg":"2026-11-30 03:04:05.000 GMT [7] LOG:  redirecting log output to logging collector process"}`},
		// A damaged record is kept, wrapped.
		{`{"error_severity":"LOG","mess`, true, `"msg":"{\"error_severity\":\"LOG\",\"mess"`},
	} {
		got := string(formatLogLine([]byte(c.line), c.jsonlog, now))
		if !strings.HasSuffix(got, "\n") || !json.Valid([]byte(got)) || !strings.Contains(got, c.want) {
			t.Errorf("formatLogLine(%s)\n got %s\nwant %s", c.line, got, c.want)
		}
	}
}

// A line longer than maxLogLine is cut, and the relay goes on.
func TestRelayOutlivesALongLine(t *testing.T) {
	var out strings.Builder
	l := &logRelay{out: &out}
	w := l.writer()
	_, _ = w.Write([]byte(strings.Repeat("x", maxLogLine+10) + "\nnext line\n"))
	_, _ = w.Write([]byte(strings.Repeat("z", maxLogLine)))
	_, _ = w.Write([]byte("zz\nthird line\n"))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || len(lines[0]) > maxLogLine+200 || len(lines[2]) > maxLogLine+200 ||
		!strings.Contains(lines[1], "next line") || !strings.Contains(lines[3], "third line") {
		t.Errorf("writer: %d lines, the last %.80s", len(lines), lines[len(lines)-1])
	}
	out.Reset()
	l.relay(strings.NewReader(strings.Repeat("y", maxLogLine+10)+"\nafter\n"), false)
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || len(lines[0]) > maxLogLine+200 || !strings.Contains(lines[1], "after") {
		t.Errorf("relay: %d lines, the first %d bytes", len(lines), len(lines[0]))
	}
}
