package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// Demotion (a planned switch between regions; the protocol is in
// instanceapi.DemotionToken's file): a switchover whose target is
// instanceapi.ExternalHolder. After the clean shutdown and before the
// handover, the primary ships the segment that holds its shutdown
// checkpoint and claims its own archive as demoted (shipLastWAL).

// demoting says whether a switchover to holder demotes the Database.
func demoting(holder string) bool { return holder == instanceapi.ExternalHolder }

// shipLastWAL ships, after a clean shutdown, the segment that holds the
// shutdown checkpoint to the archive as <segment>.demoted (PostgreSQL
// archived every completed segment before it exited), then claims the
// archive as demoted, and returns the demotion token. A Database that
// archives nothing ships nothing: a replica that streams received the
// checkpoint before postgres exited.
func (m *Manager) shipLastWAL(ctx context.Context) (string, error) {
	out, err := m.controlData(ctx, m.cfg.PGData)
	if err != nil {
		return "", err
	}
	cd := parseControlData(out)
	tli, err1 := strconv.Atoi(cd["Latest checkpoint's TimeLineID"])
	lsn, ok := postgres.ParseLSN(cd["Latest checkpoint location"])
	size, err2 := strconv.ParseInt(cd["Bytes per WAL segment"], 10, 64)
	if err1 != nil || err2 != nil || !ok {
		return "", fmt.Errorf("pg_controldata gave no checkpoint timeline, location or segment size: %q", out)
	}
	token := instanceapi.DemotionToken{Database: m.cfg.Namespace + "/" + m.cfg.Cluster, Timeline: tli, LSN: postgres.FormatLSN(lsn)}.Encode()
	m.shared.mu.Lock()
	a := m.shared.archiver
	m.shared.mu.Unlock()
	if a == nil {
		return token, nil
	}
	name := wal.SegmentName(tli, lsn, size) + ".demoted"
	dir, err := os.MkdirTemp(filepath.Dir(filepath.Clean(m.cfg.PGData)), "demoted-wal-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	shipped := filepath.Join(dir, name)
	// A link, not a copy: postgres is stopped, and the name is what the
	// archive stores it under.
	if err := os.Link(filepath.Join(m.cfg.PGData, "pg_wal", name[:24]), shipped); err != nil {
		return "", err
	}
	err = wal.Push(ctx, a.Storage, a.Prefix, shipped, a.Keys)
	if errors.Is(err, wal.ErrDifferent) {
		// An earlier demotion that failed after shipping, whose primary
		// then wrote on: this copy holds all of that one and more.
		if err = a.Storage.Delete(ctx, wal.Key(a.Prefix, name)); err == nil {
			err = wal.Push(ctx, a.Storage, a.Prefix, shipped, a.Keys)
		}
	}
	if err != nil {
		return "", fmt.Errorf("failed to archive %s: %w", name, err)
	}
	m.log.Info("Archived the last WAL of the demoted primary", "file", name)
	return token, wal.ClaimPromotion(ctx, a.Storage, a.Prefix, instanceapi.PromotionClaim{Database: m.cfg.Namespace + "/" + m.cfg.Cluster + " (demoted)",
		DatabaseUID: instanceapi.DemotedClaimUID(m.cfg.DatabaseUID), Pod: m.cfg.Pod, Time: time.Now().UTC()})
}
