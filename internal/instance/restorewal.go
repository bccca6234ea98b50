package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// RestorePath is the socket's HTTP path for restoring a file; the body is
// the absolute path to write it to.
const RestorePath = "/restore/"

// standbyArchiveAfter is how long a running replica goes without streaming
// before its restore_command serves WAL from the archive. While it
// streams, while postgres starts (it picks its timeline then), and while
// the lease names it (a promotion), the archive answers nothing: postgres
// reads its own pg_wal and streams, as without an archive, and a
// promotion waits for no storage.
const standbyArchiveAfter = 5 * time.Second

// standbyFetchTimeout bounds one answer to a replica's restore_command.
const standbyFetchTimeout = 10 * time.Second

// standbyRestoreSettings is a replica's restore_command when WAL is
// archived: a replica whose primary removed WAL it still needs catches up
// from the archive instead of being cloned again. A replica Database's
// instances read the source's archive with it.
func (c *Config) standbyRestoreSettings() string {
	self, ok := c.archivingSelf()
	if c.Source != nil {
		exe, err := os.Executable()
		self, ok = exe, err == nil
	}
	if !ok {
		return ""
	}
	return fmt.Sprintf("restore_command = '%s instance wal-restore --standby --socket %s %%f %%p'\n", self, ArchiveSocket(c.RunDir))
}

// archiveHolds says whether the WAL archive holds the file name.
func (m *Manager) archiveHolds(ctx context.Context, name string) bool {
	m.shared.mu.Lock()
	a := m.shared.archiver
	m.shared.mu.Unlock()
	if a == nil {
		return false
	}
	_, err := a.Storage.Size(ctx, wal.Key(a.Prefix, name))
	if err != nil && !errors.Is(err, backup.ErrNotFound) {
		m.log.Info("Could not look for a WAL segment in the archive", "segment", name, "reason", err.Error())
	}
	return err == nil
}

// noteStreaming records, from an observation of running postgres (under
// mu), since when it has not streamed: the archive serves a replica's
// restore_command only after standbyArchiveAfter of that. A replica that
// streams again needs none of the segments fetched ahead.
func (m *Manager) noteStreaming(streaming bool) {
	switch {
	case streaming && !m.shared.notStreamingSince.IsZero():
		m.shared.notStreamingSince, m.shared.streamLost = time.Time{}, time.Time{}
		if m.shared.standbyWAL != nil {
			m.shared.standbyWAL.Clear()
		}
	case !streaming && m.shared.notStreamingSince.IsZero():
		m.shared.notStreamingSince = time.Now()
		if m.shared.streamed {
			m.shared.streamLost = m.shared.notStreamingSince
		}
	}
	m.shared.streamed = streaming
}

// handleRestoreWAL answers restore_command: a recovery's from its
// restorer, a replica's from the archive (see standbyArchiveAfter). A
// file the archive does not hold is a 404.
func (m *Manager) handleRestoreWAL(w http.ResponseWriter, r *http.Request) {
	dest, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil || !filepath.IsAbs(string(dest)) {
		http.Error(w, "the body must be the absolute path to restore to", http.StatusBadRequest)
		return
	}
	m.shared.mu.Lock()
	run, standby, since := m.shared.replay, m.shared.standbyWAL, m.shared.notStreamingSince
	m.shared.mu.Unlock()
	name := r.PathValue("name")
	if run == nil && m.source != nil && following(m.holderName()) {
		m.restoreFromSource(w, r, name, string(dest))
		return
	}
	if run == nil {
		m.restoreForStandby(w, r, standby, since, name, string(dest))
		return
	}
	err = run.restorer.Restore(r.Context(), name, string(dest))
	switch {
	case errors.Is(err, wal.ErrNotArchived):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// restoreForStandby answers a replica's restore_command from the archive.
// It never fails recovery: a storage error is logged and answered as a
// file not archived, and postgres goes back to streaming.
func (m *Manager) restoreForStandby(w http.ResponseWriter, r *http.Request, rs *wal.Restorer, since time.Time, name, dest string) {
	if rs == nil || m.role() != instanceapi.RoleReplica || m.holderName() == m.cfg.Pod ||
		since.IsZero() || time.Since(since) < standbyArchiveAfter {
		http.Error(w, "this replica's WAL comes from its primary now", http.StatusNotFound)
		return
	}
	m.restoreNeverFailing(w, r, rs, name, dest, "the archive")
}

// restoreNeverFailing answers a standby's restore_command from the
// archive rs reads (from names it): a storage error is logged and
// answered as a file not archived, so recovery goes on, by streaming or
// by asking again.
func (m *Manager) restoreNeverFailing(w http.ResponseWriter, r *http.Request, rs *wal.Restorer, name, dest, from string) {
	ctx, cancel := context.WithTimeout(r.Context(), standbyFetchTimeout)
	defer cancel()
	err := rs.Restore(ctx, name, dest)
	switch {
	case errors.Is(err, wal.ErrNotArchived):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		m.log.Info("Could not restore WAL for this standby", "from", from, "file", name, "reason", err.Error())
		http.Error(w, err.Error(), http.StatusNotFound)
	default:
		m.log.V(1).Info("Restored WAL for this standby", "from", from, "file", name)
		w.WriteHeader(http.StatusNoContent)
	}
}
