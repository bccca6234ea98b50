package wal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
)

// Restorer answers PostgreSQL's restore_command from the archive. Recovery
// asks for one file at a time and replays it before it asks for the next;
// the Restorer fetches the segments after the one asked for while that one
// replays, Ahead of them at once, into Dir, so replay rarely waits for a
// download. Dir must be on the data directory's file system: a fetched
// file is renamed into place, never copied.
type Restorer struct {
	Storage backup.Storage
	Prefix  string
	// Keys: every file's seal must verify under Keys.Seal, and an
	// encrypted one is decrypted with Keys.Encrypt.
	Keys backup.Keys
	Dir  string
	// Ahead is how many segments are fetched ahead of recovery's request.
	Ahead int
	// SegmentSize is wal_segment_size (16 MiB when 0): it says which
	// segment follows which.
	SegmentSize int64
	// Retry bounds how long a file is tried again after a storage error
	// before Restore gives up (a minute when 0). A file the archive does
	// not hold is answered at once with ErrNotArchived.
	Retry time.Duration
	// Demoted answers a segment the archive does not hold with its
	// <segment>.demoted when it has one: the last WAL a demoted primary
	// shipped (a planned switch), which a replica of it must replay.
	// PostgreSQL's own <segment>.partial files are never handed out.
	Demoted bool

	mu    sync.Mutex
	jobs  map[string]*fetchJob
	stats RestoreStats
}

// RestoreStats is what the Restorer has done since it started.
type RestoreStats struct {
	// Restored counts files handed to recovery, Prefetched those among them
	// that were fetched ahead of the request; Bytes is their size.
	Restored, Prefetched int
	Bytes                int64
	// Last is the file last handed to recovery.
	Last string
}

type fetchJob struct {
	done    chan struct{}
	err     error
	ahead   bool
	started time.Time
}

// Stats returns a copy of the counters.
func (r *Restorer) Stats() RestoreStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Restore writes the archived file name to dest (restore_command's %p,
// absolute) and starts fetching the segments that follow it. It returns
// ErrNotArchived when the archive does not hold name: for a history file
// that is how recovery learns the newest timeline, and for a segment it
// is the archive's end.
func (r *Restorer) Restore(ctx context.Context, name, dest string) error {
	if !ValidName(name) {
		return fmt.Errorf("%q is not a WAL file name", name)
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return err
	}
	r.mu.Lock()
	if r.jobs == nil {
		r.jobs = map[string]*fetchJob{}
	}
	j := r.jobs[name]
	delete(r.jobs, name)
	r.dropBefore(name)
	r.mu.Unlock()
	r.prefetch(ctx, name)

	if j != nil {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A fetch ahead that failed, or found nothing (the archive may have
	// grown since), is tried again now that recovery asks.
	if j == nil || j.err != nil {
		j = &fetchJob{done: make(chan struct{}), started: time.Now()}
		j.err = r.fetchRetrying(ctx, name)
		close(j.done)
	}
	if j.err != nil {
		return j.err
	}
	staged := filepath.Join(r.Dir, name)
	fi, err := os.Stat(staged)
	if err != nil {
		return err
	}
	if err := os.Rename(staged, dest); err != nil {
		return fmt.Errorf("failed to move %s into place: %w", name, err)
	}
	r.mu.Lock()
	r.stats.Restored++
	r.stats.Bytes += fi.Size()
	r.stats.Last = name
	if j.ahead {
		r.stats.Prefetched++
	}
	r.mu.Unlock()
	return nil
}

// prefetch starts fetching the Ahead segments after name that are not
// fetched or being fetched already.
func (r *Restorer) prefetch(ctx context.Context, name string) {
	if !segmentName.MatchString(name) || r.Ahead < 1 {
		return
	}
	next := name
	for range r.Ahead {
		next = NextSegment(next, r.SegmentSize)
		r.mu.Lock()
		if _, ok := r.jobs[next]; ok {
			r.mu.Unlock()
			continue
		}
		j := &fetchJob{done: make(chan struct{}), ahead: true, started: time.Now()}
		r.jobs[next] = j
		r.mu.Unlock()
		go func(name string) {
			// Ahead of recovery, a missing file is normal (the archive's
			// end, or another timeline): one try, no retries.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), prefetchTimeout)
			defer cancel()
			j.err = Fetch(fctx, r.Storage, r.Prefix, name, filepath.Join(r.Dir, name), r.Keys)
			close(j.done)
		}(next)
	}
}

// prefetchTimeout bounds a fetch ahead of recovery: a storage that hangs
// must not keep it (and its goroutine) for ever.
const prefetchTimeout = 2 * time.Minute

// Clear forgets every segment fetched ahead and deletes Dir once their
// fetches end: a replica that streams again, or was promoted, needs none.
func (r *Restorer) Clear() {
	r.mu.Lock()
	jobs := r.jobs
	r.jobs = nil
	r.mu.Unlock()
	go func() {
		for _, j := range jobs {
			<-j.done
		}
		_ = os.RemoveAll(r.Dir)
	}()
}

// dropBefore forgets, and deletes, the segments fetched ahead that sort
// before name on its timeline: recovery moved past them (a timeline switch
// can leave some behind). Called with mu held.
func (r *Restorer) dropBefore(name string) {
	if !segmentName.MatchString(name) {
		return
	}
	for other, j := range r.jobs {
		if segmentName.MatchString(other) && other[:8] == name[:8] && other < name {
			delete(r.jobs, other)
			go func() {
				<-j.done
				_ = os.Remove(filepath.Join(r.Dir, other))
			}()
		}
	}
}

// fetchRetrying fetches name into Dir, trying again after storage errors
// for up to Retry.
func (r *Restorer) fetchRetrying(ctx context.Context, name string) error {
	deadline := time.Now().Add(cmp.Or(r.Retry, time.Minute))
	backoff := 200 * time.Millisecond
	for {
		err := Fetch(ctx, r.Storage, r.Prefix, name, filepath.Join(r.Dir, name), r.Keys)
		if errors.Is(err, ErrNotArchived) && r.Demoted && segmentName.MatchString(name) {
			err = Fetch(ctx, r.Storage, r.Prefix, name+".demoted", filepath.Join(r.Dir, name), r.Keys)
		}
		if err == nil || errors.Is(err, ErrNotArchived) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// SegmentName is the name of the segment holding lsn on timeline tli, for
// segments of segmentSize bytes (16 MiB when 0).
func SegmentName(tli int, lsn uint64, segmentSize int64) string {
	seg, perLog := lsn/segmentSizeOr16MiB(segmentSize), segmentsPerLog(segmentSize)
	return fmt.Sprintf("%08X%08X%08X", tli, seg/perLog, seg%perLog)
}

// NextSegment is the name of the segment after name on its timeline, for
// segments of segmentSize bytes (16 MiB when 0).
func NextSegment(name string, segmentSize int64) string {
	perLog := segmentsPerLog(segmentSize)
	log, _ := strconv.ParseUint(name[8:16], 16, 32)
	seg, _ := strconv.ParseUint(name[16:24], 16, 32)
	seg++
	if seg >= perLog {
		log, seg = log+1, 0
	}
	return fmt.Sprintf("%s%08X%08X", name[:8], log, seg)
}

// segmentSizeOr16MiB is segmentSize, or 16 MiB when it is 0.
func segmentSizeOr16MiB(segmentSize int64) uint64 {
	if segmentSize <= 0 {
		return 16 << 20
	}
	return uint64(segmentSize)
}

// segmentsPerLog is how many segments of segmentSize one log (the middle
// 8 hex digits of a name) holds.
func segmentsPerLog(segmentSize int64) uint64 {
	return uint64(0x100000000) / segmentSizeOr16MiB(segmentSize)
}
