package instance

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// backlog measures the WAL waiting in pg_wal for the archive and how fast
// it grows, to say when the volume would fill.
type backlog struct {
	samples []backlogSample
}

type backlogSample struct {
	at    time.Time
	bytes int64
}

// fill adds the backlog in walDir, the volume's free space and the time to
// full to s.
func (b *backlog) fill(s *instanceapi.ArchiveStatus, walDir string, now time.Time) {
	entries, err := os.ReadDir(filepath.Join(walDir, "archive_status"))
	if err != nil {
		return
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".ready")
		if !ok {
			continue
		}
		if fi, err := os.Stat(filepath.Join(walDir, name)); err == nil {
			s.Pending++
			s.PendingBytes += fi.Size()
		}
	}
	var fs syscall.Statfs_t
	if syscall.Statfs(walDir, &fs) == nil {
		s.VolumeFreeBytes = int64(fs.Bavail) * fs.Bsize
	}
	if n := len(b.samples); n == 0 || now.Sub(b.samples[n-1].at) >= backlogEvery {
		b.samples = append(b.samples, backlogSample{at: now, bytes: s.PendingBytes})
	}
	for len(b.samples) > 1 && now.Sub(b.samples[0].at) > backlogWindow {
		b.samples = b.samples[1:]
	}
	s.TimeToFullSeconds = timeToFull(b.samples, s.VolumeFreeBytes)
}

// timeToFull is how long free bytes last at the rate the backlog grew
// between the first and last samples; 0 when it did not grow.
func timeToFull(samples []backlogSample, free int64) int64 {
	if len(samples) < 2 || free <= 0 {
		return 0
	}
	first, last := samples[0], samples[len(samples)-1]
	grew, took := last.bytes-first.bytes, last.at.Sub(first.at).Seconds()
	if grew <= 0 || took <= 0 {
		return 0
	}
	return int64(float64(free) / (float64(grew) / took))
}

const (
	// backlogEvery spaces the samples; backlogWindow is how far back the
	// growth rate looks.
	backlogEvery  = 5 * time.Second
	backlogWindow = 3 * time.Minute
)
