package wal

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/daytwo-dev/daytwo/internal/backup"
)

// Archiver ships the files PostgreSQL has finished and announced for
// archiving (pg_wal/archive_status/<name>.ready), up to Parallel at once,
// oldest first. PostgreSQL's archive_command runs one file at a time and
// waits for each; with the Archiver it only waits for a push already under
// way or done (Archive), so archiving keeps up with more than one upload's
// throughput.
type Archiver struct {
	Storage backup.Storage
	Prefix  string
	// Keys seal and encrypt each stored file; none when empty.
	Keys backup.Keys
	// WALDir is the data directory's pg_wal.
	WALDir   string
	Parallel int
	// Scan is how often archive_status is read for new ready files.
	Scan time.Duration
	Log  logr.Logger
	// Replica says whether this server is a standby (archive_mode =
	// always): its files are its primary's, pushed with PushCopy.
	Replica func() bool
	// Claim, when set, must succeed once before anything is pushed (see
	// ClaimArchive); until it does, every push fails with its error.
	Claim func(context.Context) error

	once    sync.Once
	claimMu sync.Mutex
	claimed bool
	slots   chan struct{}
	mu      sync.Mutex
	jobs    map[string]*job
	// retryAt holds the scanner back after a failure: archive_command still
	// asks at PostgreSQL's own pace.
	retryAt time.Time
	backoff time.Duration
	stats   Stats
}

// Stats is what the Archiver has done since it started.
type Stats struct {
	Archived, Failed int
	// LastArchived is the newest file stored, and when.
	LastArchived     string
	LastArchivedTime time.Time
	// LastError is the latest failure, and when; cleared by a success.
	LastError     string
	LastErrorTime time.Time
}

// PushTimeout bounds one file's upload.
const PushTimeout = 5 * time.Minute

type job struct {
	done chan struct{}
	err  error
}

func (a *Archiver) init() {
	a.once.Do(func() {
		if a.Parallel < 1 {
			a.Parallel = 1
		}
		if a.Scan <= 0 {
			a.Scan = 200 * time.Millisecond
		}
		a.slots = make(chan struct{}, a.Parallel)
		a.jobs = map[string]*job{}
	})
}

// Stats returns a copy of the counters.
func (a *Archiver) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Run reads archive_status and starts pushes until ctx ends.
func (a *Archiver) Run(ctx context.Context) {
	a.init()
	t := time.NewTicker(a.Scan)
	defer t.Stop()
	for {
		a.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scan starts a push for each ready file without one, oldest first, and
// forgets finished pushes whose file PostgreSQL no longer lists as ready.
func (a *Archiver) scan(ctx context.Context) {
	entries, err := os.ReadDir(filepath.Join(a.WALDir, "archive_status"))
	if err != nil {
		return
	}
	var ready []string
	for _, e := range entries {
		if name, ok := readyName(e.Name()); ok {
			ready = append(ready, name)
		}
	}
	slices.SortFunc(ready, compareNames)
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, j := range a.jobs {
		select {
		case <-j.done:
			if !slices.Contains(ready, name) {
				delete(a.jobs, name)
			}
		default:
		}
	}
	if time.Now().Before(a.retryAt) {
		return
	}
	for _, name := range ready {
		if _, ok := a.jobs[name]; !ok {
			a.start(ctx, name)
		}
	}
}

// compareNames orders history files before segments, so that a new
// timeline's history is archived before its first segment, as PostgreSQL
// does; then by name, which is WAL order within each kind.
func compareNames(x, y string) int {
	hx, hy := filepath.Ext(x) == ".history", filepath.Ext(y) == ".history"
	switch {
	case hx && !hy:
		return -1
	case hy && !hx:
		return 1
	}
	return cmp.Compare(x, y)
}

// start pushes name in the background, holding a slot (mu held).
func (a *Archiver) start(ctx context.Context, name string) *job {
	j := &job{done: make(chan struct{})}
	a.jobs[name] = j
	go func() {
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			j.err = ctx.Err()
			a.finish(name, j)
			return
		}
		push := Push
		if a.Replica != nil && a.Replica() {
			push = PushCopy
		}
		// Bounded, so that a hung upload cannot hold a slot for good.
		pctx, cancel := context.WithTimeout(ctx, PushTimeout)
		if j.err = a.claim(pctx); j.err == nil {
			j.err = push(pctx, a.Storage, a.Prefix, filepath.Join(a.WALDir, name), a.Keys)
		}
		cancel()
		<-a.slots
		a.finish(name, j)
	}()
	return j
}

// claim runs Claim until it has succeeded once.
func (a *Archiver) claim(ctx context.Context) error {
	if a.Claim == nil {
		return nil
	}
	a.claimMu.Lock()
	defer a.claimMu.Unlock()
	if a.claimed {
		return nil
	}
	if err := a.Claim(ctx); err != nil {
		return err
	}
	a.claimed = true
	return nil
}

// finish records a push's result; a failed push is forgotten, so that the
// next ask or scan tries again.
func (a *Archiver) finish(name string, j *job) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if j.err != nil {
		a.stats.Failed++
		a.stats.LastError, a.stats.LastErrorTime = j.err.Error(), now
		a.backoff = min(max(2*a.backoff, time.Second), 30*time.Second)
		a.retryAt = now.Add(a.backoff)
		if a.jobs[name] == j {
			delete(a.jobs, name)
		}
		a.Log.Error(j.err, "Failed to archive a WAL file", "file", name, "retryIn", a.backoff.String())
	} else {
		a.stats.Archived++
		if a.stats.LastArchived == "" || compareNames(name, a.stats.LastArchived) > 0 {
			a.stats.LastArchived = name
		}
		a.stats.LastArchivedTime = now
		a.stats.LastError, a.backoff = "", 0
	}
	close(j.done)
}

// Archive stores name, or waits for the push under way, and says whether it
// is in the archive: what archive_command asks.
func (a *Archiver) Archive(ctx context.Context, name string) error {
	a.init()
	a.mu.Lock()
	j, ok := a.jobs[name]
	if !ok {
		j = a.start(context.WithoutCancel(ctx), name)
	}
	a.mu.Unlock()
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
