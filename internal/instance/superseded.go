package instance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// The source's side of a replica Database's promotion (the protocol is in
// internal/controller/database/replica.go): every instance that archives
// reads its archive's promotion claim every promotedCheck. Once it finds a
// claim of another Database, it is superseded for good: a primary stops
// serving at once (its run is fenced), and no instance of this Database
// starts as primary or is promoted again. Only deleting the claim (after
// the other side is gone) undoes it.

// promotedCheck is how often an instance reads its archive's claim: the
// longest a source that reaches its bucket serves after a replica was
// promoted from it.
const promotedCheck = 5 * time.Second

// supersededMark, in the data directory, keeps what superseded learnt
// across restarts (a clone of the data inherits it: the whole Database
// is superseded).
const supersededMark = "daytwo-superseded"

// supersededBy names the Database promoted from this one's archive, ""
// while none was: as learnt since the manager started, or as the data
// directory's mark says.
func (m *Manager) supersededBy() string {
	m.shared.mu.Lock()
	by := m.shared.status.Superseded
	m.shared.mu.Unlock()
	if by != "" {
		return by
	}
	b, err := os.ReadFile(filepath.Join(m.cfg.PGData, supersededMark))
	if err != nil || len(b) == 0 {
		return ""
	}
	by = strings.TrimSpace(string(b))
	m.shared.mu.Lock()
	m.shared.status.Superseded = by
	m.shared.mu.Unlock()
	return by
}

// watchPromotions reads the archive's claim once before it returns (an
// instance that starts knows before it learns its role), then every
// promotedCheck until ctx ends. The first read is bounded by
// firstPromotedCheck: a bucket that does not answer must not hold up a
// start for long.
func (m *Manager) watchPromotions(ctx context.Context, st backup.Storage, prefix string) {
	var logged time.Time
	read := func(limit time.Duration) {
		rctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		c, err := wal.PromotionOf(rctx, st, prefix)
		if err != nil && ctx.Err() == nil && time.Since(logged) > time.Minute {
			// Fail-open: a claim that cannot be read does not stop this
			// Database. Said once a minute at most.
			logged = time.Now()
			m.log.Info("Could not read the WAL archive's promotion claim; a replica promoted meanwhile is not seen", "reason", err.Error())
		}
		// Its own claim, or the one it made as it was demoted, supersedes
		// nothing.
		if err == nil && c != nil && c.DatabaseUID != m.cfg.DatabaseUID && c.DatabaseUID != instanceapi.DemotedClaimUID(m.cfg.DatabaseUID) {
			m.superseded(claimText(*c))
		}
	}
	read(firstPromotedCheck)
	go func() {
		for sleepCtx(ctx, promotedCheck) {
			read(promotedCheck)
		}
	}()
}

// firstPromotedCheck bounds the read at a start.
const firstPromotedCheck = 2 * time.Second

// superseded records by, and fences a primary's run.
func (m *Manager) superseded(by string) {
	m.shared.mu.Lock()
	first := m.shared.status.Superseded == ""
	m.shared.status.Superseded = by
	fence, primary := m.shared.runFence, m.shared.status.Role == instanceapi.RolePrimary
	m.shared.mu.Unlock()
	if first {
		m.log.Info("Another Database was promoted from this one's WAL archive: no instance of this one serves as primary again", "by", by)
		if err := writeFileAtomic(filepath.Join(m.cfg.PGData, supersededMark), by+"\n"); err != nil {
			m.log.Error(err, "Failed to mark the data superseded; the mark is kept in memory only until the manager restarts")
		}
	}
	if primary && fence != nil {
		select {
		case fence <- fmt.Errorf("%s was promoted from this Database's WAL archive", by):
		default: // a fence is on its way already
		}
	}
}

// ensureRolesAfterPromotion gives a promoted replica Database's roles
// its own Secret's passwords, on conn (the promotion's): its peers
// stream with them at once. The monitor does it again at its next
// connection, as on every primary.
func (m *Manager) ensureRolesAfterPromotion(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = local"); err != nil {
		m.log.Error(err, "Failed to set this Database's passwords after the promotion")
		return
	}
	if err := m.ensureRoles(ctx, conn); err != nil {
		m.log.Error(err, "Failed to set this Database's passwords after the promotion")
	}
}

// claimText names the Database a claim was made for, and when.
func claimText(c instanceapi.PromotionClaim) string {
	return fmt.Sprintf("Database %s (promoted at %s by %s)", c.Database, c.Time.UTC().Format(time.RFC3339), c.Pod)
}

// releaseSuperseded releases the primary lease a superseded instance
// holds, once: it will never serve under it, and the operator, which asks
// no holder whose renewed lease ran out, then asks it and learns why.
func (m *Manager) releaseSuperseded(ctx context.Context) {
	m.shared.mu.Lock()
	done := m.shared.releasedSuperseded
	m.shared.releasedSuperseded = true
	m.shared.mu.Unlock()
	if done || m.lease == nil {
		return
	}
	if err := m.lease.Release(ctx, m.cfg.Pod, ""); err != nil {
		m.log.Info("Could not release the primary lease of a superseded Database", "reason", err.Error())
		m.shared.mu.Lock()
		m.shared.releasedSuperseded = false
		m.shared.mu.Unlock()
	}
}
