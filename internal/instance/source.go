package instance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// A replica Database's instances follow its source while the primary
// lease names instanceapi.ExternalHolder (see the protocol in
// internal/controller/database/replica.go): each is a standby whose
// restore_command reads the source's archive at any time, and which
// streams from the source's -rw address when it has one. The first start
// restores the source's newest base backup rather than cloning a primary.
// The instance that is promoted claims the source's archive first.

// source is a replica Database's source, as this manager reaches it.
type source struct {
	// prefix is the source's archive in storage (cfg.Source.Prefix).
	prefix  string
	storage backup.Storage
	keys    backup.Keys
	// wal answers restore_command while the lease names the source.
	wal *wal.Restorer
}

// following says whether the lease holder is the source outside: this
// Database follows it, and no instance is its primary.
func following(holder string) bool { return holder == instanceapi.ExternalHolder }

// replicaSource reads what the operator says this replica Database
// follows; nil for any other Database.
func (c *Config) replicaSource() (*instanceapi.ReplicaSource, error) {
	s, err := readConfigJSON[instanceapi.ReplicaSource](c, instanceapi.ReplicaSourceFile)
	if err != nil || s == nil {
		return nil, err
	}
	if s.S3 == nil && s.Directory == "" {
		return nil, fmt.Errorf("invalid %s: it names no storage", instanceapi.ReplicaSourceFile)
	}
	return s, nil
}

// openSource opens a replica Database's source, once, before anything
// else runs; the configuration never changes while the pod runs.
func (m *Manager) openSource() error {
	s, err := m.cfg.replicaSource()
	if err != nil || s == nil {
		return err
	}
	st, err := m.cfg.storageOf(&s.Archive, instanceapi.SourceFiles)
	if err != nil {
		return fmt.Errorf("failed to open the replica's source: %w", err)
	}
	keys := m.cfg.keysOf(instanceapi.SourceFiles)
	if err := backup.CheckKeys(keys); err != nil {
		return fmt.Errorf("failed to open the replica's source: %w", err)
	}
	m.cfg.Source = s
	m.source = &source{prefix: s.Prefix, storage: st, keys: keys,
		// Kept short: postgres retries a missing file itself, and a
		// standby that also streams must not stall on storage.
		wal: &wal.Restorer{Storage: st, Prefix: s.Prefix, Keys: keys, Dir: filepath.Clean(m.cfg.PGData) + ".source-wal",
			Ahead: 4, Retry: time.Second, Demoted: true}}
	return nil
}

// sourceUpstream is where a replica streams from while it follows the
// source: the source's -rw address, or nowhere ("": archive only).
func (c *Config) sourceUpstream() (string, int) {
	if c.Source == nil || c.Source.Host == "" {
		return "", 0
	}
	return c.Source.Host, c.Source.Port
}

// sourceApplicationName is how a replica Database's instance names
// itself to the source: with a slash, which no pod name has, so the
// source never takes it for one of its own standbys (synchronous
// replication matches application_name); at most 63 bytes, as
// PostgreSQL keeps.
func sourceApplicationName(namespace, pod string) string {
	name := "replica/" + namespace + "/" + pod
	return name[:min(len(name), 63)]
}

// sourceSSLParams verify the source's server certificate with the CA the
// operator projected for it.
func (c *Config) sourceSSLParams() string {
	return " sslmode=verify-full sslrootcert=" + filepath.Join(c.SecretsDir, instanceapi.SecretSourceServerCA)
}

// sourcePassLine is the password file's line for the source's
// replication user, "" when the replica does not stream.
func (c *Config) sourcePassLine() (string, error) {
	host, port := c.sourceUpstream()
	if host == "" {
		return "", nil
	}
	pw, err := c.secret(instanceapi.SecretSourceReplicationPassword)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s:%d:*:%s:%s\n", pgpassEscape(host), port, replicationUser, pgpassEscape(pw)), nil
}

// cloneFromSource restores the source's newest base backup into dir; the
// standby started on it replays the source's archive from there.
func (m *Manager) cloneFromSource(ctx context.Context, dir string) error {
	if m.source == nil {
		return permanentError{errors.New("the primary lease names the replica's source, but no source is configured")}
	}
	r := &Recovery{Storage: m.source.storage, Prefix: m.source.prefix, Keys: m.source.keys}
	b, err := chooseBaseOf(ctx, r)
	if err != nil {
		return err
	}
	m.log.Info("Restoring the source's base backup", "id", b.ID, "endLSN", b.EndLSN, "finished", b.Finished)
	if err := wal.ExtractBase(ctx, r.Storage, r.Prefix, b, dir, r.Keys); err != nil {
		return err
	}
	// writeConfig writes standby.signal: this server never leaves
	// recovery at the archive's end.
	if err := os.Remove(filepath.Join(dir, "recovery.signal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// restoreFromSource answers restore_command from the source's archive
// while the Database follows it. A storage error is answered as a file
// not archived: postgres tries again (wal_retrieve_retry_interval), or
// streams.
func (m *Manager) restoreFromSource(w http.ResponseWriter, r *http.Request, name, dest string) {
	m.restoreNeverFailing(w, r, m.source.wal, name, dest, "the source's archive")
}

// sourceProgress is how far this instance has followed the source (under
// mu): nil unless it follows one.
func (m *Manager) sourceProgress(s *instanceapi.Status) *instanceapi.SourceProgress {
	if m.source == nil || !following(m.shared.holder) {
		return nil
	}
	p := &instanceapi.SourceProgress{Streaming: s.Streaming, ReplayedTime: m.shared.replayedAt}
	end, _ := postgres.ParseLSN(s.ReceivedLSN)
	if last := m.source.wal.Stats().Last; len(last) == 24 {
		end = max(end, wal.SegmentStart(last, 16<<20)+16<<20) // wal_segment_size as initdb leaves it
	}
	if end > 0 {
		p.EndLSN = postgres.FormatLSN(end)
	}
	return p
}

// sourceClaimWait is how long a promotion waits after its claim: the
// source reads its archive's claim every promotedCheck, each read bounded
// by promotedCheck, so a source that reaches its bucket has stopped
// serving by then, before this instance serves a write.
const sourceClaimWait = 2*promotedCheck + time.Second

// claimSource, before a replica Database's instance is promoted, claims
// the source's archive for this Database (wal.ClaimPromotion): no other
// Database may then be promoted from the same source, and the source
// stops serving once it sees the claim. The claim is made once: its time
// is kept on the lease (v.SourceClaim), which a later promotion of any
// instance of this Database reads, and every promotion waits until
// sourceClaimWait has passed since it. A waived claim (the operator's,
// for spec.replica.promotion: Unclaimed) and a Database that never
// followed a source make none.
func (m *Manager) claimSource(ctx context.Context, v LeaseView) error {
	if m.source == nil || v.SourceClaim == instanceapi.SourceClaimWaived {
		return nil
	}
	if enc, ok := strings.CutPrefix(v.SourceClaim, instanceapi.SourceClaimToken); ok {
		return m.consumeToken(ctx, enc)
	}
	at, err := claimedAt(v.SourceClaim)
	if err != nil {
		if at, err = m.writeClaim(ctx); err != nil {
			return err
		}
	}
	if wait := time.Until(at.Add(sourceClaimWait)); wait > 0 {
		m.setMessage("claimed the source's WAL archive; waiting " + wait.Round(time.Second).String() + " for the source to see it and stop serving")
		if !sleepCtx(ctx, wait) {
			return ctx.Err()
		}
	}
	return nil
}

// claimedAt is the time a lease's claim record holds; an error when it
// holds none.
func claimedAt(record string) (time.Time, error) {
	t, ok := strings.CutPrefix(record, instanceapi.SourceClaimed)
	if !ok {
		return time.Time{}, errors.New("no claim recorded")
	}
	return time.Parse(time.RFC3339Nano, t)
}

// writeClaim writes the claim and records its time on the lease.
func (m *Manager) writeClaim(ctx context.Context) (time.Time, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := instanceapi.PromotionClaim{Database: m.cfg.Namespace + "/" + m.cfg.Cluster, DatabaseUID: m.cfg.DatabaseUID,
		Pod: m.cfg.Pod, Time: time.Now().UTC()}
	if err := wal.ClaimPromotion(cctx, m.source.storage, m.source.prefix, c); err != nil {
		if errors.Is(err, wal.ErrPromotedElsewhere) {
			have, _ := wal.PromotionOf(cctx, m.source.storage, m.source.prefix)
			if have != nil && have.Demoted() {
				// A planned switch: its token promotes this Database.
				return time.Time{}, fmt.Errorf("the source %s was demoted: promote this Database with the source's "+
					"status.replica.demotionToken as spec.replica.promotionToken (or with spec.replica.promotion: Unclaimed)", have.Database)
			}
			// For good: this Database is never promoted from this source.
			if have != nil {
				m.superseded(claimText(*have))
			}
		}
		return time.Time{}, fmt.Errorf("failed to claim the source's WAL archive before the promotion: %w", err)
	}
	m.log.Info("Claimed the source's WAL archive for this Database's promotion", "prefix", m.source.prefix)
	if rec, ok := m.lease.(SourceClaimRecorder); ok {
		if err := rec.RecordSourceClaim(ctx, m.cfg.Pod, instanceapi.SourceClaimed+c.Time.Format(time.RFC3339Nano)); err != nil {
			// The next promotion claims again (its own claim stands) and waits again.
			m.log.Info("Could not record the claim on the primary lease", "reason", err.Error())
		}
	}
	return c.Time, nil
}

// consumeToken, before a promotion with spec.replica.promotionToken,
// checks that this instance has replayed up to the token's LSN (the LSN
// alone: a standby's reported timeline is its last restartpoint's, which
// lags the one it replays), and consumes the
// token in the source's archive: written only if absent, so one Database
// is promoted by it, once. It makes no claim and does not wait: the
// demoted source serves no more.
func (m *Manager) consumeToken(ctx context.Context, enc string) error {
	tok, err := instanceapi.ParseDemotionToken(enc)
	if err != nil {
		return err
	}
	want, ok := postgres.ParseLSN(tok.LSN)
	if !ok {
		return fmt.Errorf("the promotion token's LSN %q is not an LSN", tok.LSN)
	}
	s := m.Status()
	if at, _ := postgres.ParseLSN(s.LSN); at < want {
		return fmt.Errorf("this instance replayed up to %s, short of the promotion token's %s", s.LSN, tok.LSN)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The source must be demoted now: a token kept from an earlier switch
	// (consumed by this Database then, so its record would let it pass)
	// must not promote this one while the source serves again.
	have, err := wal.PromotionOf(cctx, m.source.storage, m.source.prefix)
	if err != nil {
		return err
	}
	if have == nil || !have.Demoted() {
		return errors.New("the source's WAL archive says it is not demoted now (it holds no demoted claim): the promotion token is stale; " +
			"demote the source again for a new token, or promote without one")
	}
	c := instanceapi.PromotionClaim{Database: m.cfg.Namespace + "/" + m.cfg.Cluster, DatabaseUID: m.cfg.DatabaseUID, Pod: m.cfg.Pod, Time: time.Now().UTC()}
	if err := wal.ClaimKey(cctx, m.source.storage, m.source.prefix, tok.DemotionKey(), c); err != nil {
		return fmt.Errorf("failed to consume the promotion token in the source's WAL archive: %w", err)
	}
	// Promoted again (a switch back): the claim this Database made on its
	// own archive as it was demoted goes, so that its own replicas may be
	// promoted from it by a claim. Best effort: it only refuses those.
	m.shared.mu.Lock()
	a := m.shared.archiver
	m.shared.mu.Unlock()
	if a != nil {
		if err := wal.ReleaseDemoted(cctx, a.Storage, a.Prefix, m.cfg.DatabaseUID); err != nil {
			m.log.Info("Could not remove this Database's demoted claim from its own archive", "reason", err.Error())
		}
	}
	return nil
}
