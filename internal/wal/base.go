package wal

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/klauspost/compress/zstd"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// Base backups: pg_basebackup's tar of the data directory, without WAL
// (-X none: recovery takes it from the archive), compressed with zstd on
// the way to storage, with no local copy. The manifest is written last, so
// a base backup exists only once all of it is stored.

// BaseBackup is a base backup's manifest.
type BaseBackup struct {
	ID string `json:"id"`
	// Timeline, StartLSN and StartWAL say where recovery from it begins;
	// EndLSN, the point it must replay to before it is consistent.
	Timeline int       `json:"timeline"`
	StartLSN string    `json:"startLSN"`
	StartWAL string    `json:"startWAL"`
	EndLSN   string    `json:"endLSN"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Size and SHA256 are the stored (compressed) tar's.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// SystemIdentifier is the cluster it copies (IDENTIFY_SYSTEM's
	// systemid), the one the WAL archive under its prefix must hold.
	SystemIdentifier string `json:"systemIdentifier"`
	// Encrypted says the data is encrypted (backup.EncryptWriter).
	Encrypted bool `json:"encrypted,omitempty"`
	// MAC authenticates the rest under the series key; empty without one.
	MAC string `json:"mac,omitempty"`
}

// baseDomain is what a base backup manifest's MAC authenticates.
const baseDomain = "daytwo base backup v1"

// sealed is b with its MAC under key (none without a key).
func (b BaseBackup) sealed(key []byte) (BaseBackup, error) {
	b.MAC = ""
	if len(key) == 0 {
		return b, nil
	}
	mac, err := backup.SignJSON(key, baseDomain, b)
	b.MAC = mac
	return b, err
}

// trusted says whether b may be restored with key: always without one;
// with one, when its MAC verifies. A MAC that fails is an error; a
// manifest without one (taken before the series had a key) is not trusted.
func (b BaseBackup) trusted(key []byte) (bool, error) {
	if len(key) == 0 {
		return true, nil
	}
	if b.MAC == "" {
		return false, nil
	}
	mac := b.MAC
	b.MAC = ""
	if ok, err := backup.VerifyJSON(key, baseDomain, b, mac); err != nil || !ok {
		return false, errors.Join(fmt.Errorf("base backup %s's manifest %w: changed in the bucket, or written with another key",
			b.ID, backup.ErrUnauthenticated), err)
	}
	return true, nil
}

// Source is the server a base backup is taken from, over the replication
// protocol.
type Source struct {
	Host     string
	Port     int
	User     string
	Password string
	// BinDir holds pg_basebackup; empty means $PATH.
	BinDir string
	// SwitchWAL, for a standby, makes its primary finish the current WAL
	// segment (pg_switch_wal). A standby's backup ends only once the
	// segment holding its stop point is archived, and the standby archives
	// a segment only once the primary has finished it: without writes that
	// would be never. Called every SwitchEvery while the backup runs; a
	// switch with nothing written since the last one does nothing.
	SwitchWAL func(context.Context) error
}

// SwitchEvery is how often a standby's base backup asks its primary to
// finish the current WAL segment.
const SwitchEvery = 5 * time.Second

func baseKey(prefix, id, file string) string { return prefix + "base/" + id + "/" + file }

const (
	baseData     = "base.tar.zst"
	baseManifest = "backup.json"
)

var (
	// In backup_label and the backup history file the server archives.
	startPoint    = regexp.MustCompile(`START WAL LOCATION: ([0-9A-F]+/[0-9A-F]+) \(file ([0-9A-F]{24})\)`)
	startTimeline = regexp.MustCompile(`START TIMELINE: ([0-9]+)`)
	stopPoint     = regexp.MustCompile(`STOP WAL LOCATION: ([0-9A-F]+/[0-9A-F]+) `)
)

// TakeBase streams a base backup of src to storage as id, its manifest
// sealed with the series key (none when empty).
func TakeBase(ctx context.Context, src Source, st backup.Storage, prefix, id string, keys backup.Keys) (BaseBackup, error) {
	b := BaseBackup{ID: id, Started: time.Now().UTC(), Encrypted: len(keys.Encrypt) > 0}
	// Before anything is stored: an archive another cluster claimed (two
	// Databases given one prefix) must not get this one's base backups,
	// which its restores and its retention would then take for its own.
	sysID, err := systemIdentifier(ctx, src)
	if err != nil {
		return b, fmt.Errorf("failed to identify the server to back up: %w", err)
	}
	b.SystemIdentifier = sysID
	if err := checkOwner(ctx, st, prefix, b); err != nil {
		return b, err
	}
	bin := "pg_basebackup"
	if src.BinDir != "" {
		bin = filepath.Join(src.BinDir, bin)
	}
	cmd := exec.CommandContext(ctx, bin, "-h", src.Host, "-p", fmt.Sprint(src.Port), "-U", src.User,
		"-D", "-", "-F", "tar", "-X", "none", "--checkpoint=fast", "--manifest-checksums=NONE", "--no-password")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+src.Password, "PGAPPNAME=daytwo-base-backup")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return b, err
	}
	if err := cmd.Start(); err != nil {
		return b, fmt.Errorf("failed to start pg_basebackup: %w", err)
	}
	pr, pw := io.Pipe()
	sum := sha256.New()
	size := &backup.Counter{}
	// The tar is read on the way too, for its backup_label and the end of
	// the WAL range in the backup manifest, which pg_basebackup appends.
	lr, lw := io.Pipe()
	label := make(chan tarFacts, 1)
	go func() { label <- readFacts(lr); _, _ = io.Copy(io.Discard, lr) }()
	go func() {
		// Compressed, then encrypted (with an encryption key).
		ew, err := backup.EncryptWriter(keys.Encrypt, io.MultiWriter(pw, sum, size))
		var enc *zstd.Encoder
		if err == nil {
			enc, err = zstd.NewWriter(ew, zstd.WithEncoderConcurrency(2), zstd.WithEncoderLevel(zstd.SpeedFastest))
		}
		if err == nil {
			// Large reads: every chunk passes two pipes to other goroutines.
			_, err = io.CopyBuffer(io.MultiWriter(enc, lw), out, make([]byte, 1<<20))
			err = errors.Join(err, enc.Close(), ew.Close())
		}
		_ = lw.CloseWithError(err)
		_ = pw.CloseWithError(err)
	}()
	stopSwitching := make(chan struct{})
	if src.SwitchWAL != nil {
		go func() {
			t := time.NewTicker(SwitchEvery)
			defer t.Stop()
			for {
				select {
				case <-stopSwitching:
					return
				case <-t.C:
					_ = src.SwitchWAL(ctx) // the next tick tries again
				}
			}
		}()
	}
	putErr := st.Put(ctx, baseKey(prefix, id, baseData), pr)
	close(stopSwitching)
	_ = pr.CloseWithError(putErr)
	_ = lr.CloseWithError(putErr)
	if putErr != nil {
		// Nothing reads pg_basebackup's output any more: it would block.
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	if waitErr != nil {
		return b, fmt.Errorf("pg_basebackup failed: %w: %s", waitErr, lastLines(stderr.String(), 5))
	}
	if putErr != nil {
		return b, putErr
	}
	facts := <-label
	lbl := facts.label
	m, tl := startPoint.FindStringSubmatch(lbl), startTimeline.FindStringSubmatch(lbl)
	if m == nil || tl == nil {
		return b, fmt.Errorf("base backup %s holds no readable backup_label", id)
	}
	b.StartLSN, b.StartWAL = m[1], m[2]
	if b.Timeline, err = strconv.Atoi(tl[1]); err != nil {
		return b, err
	}
	// The manifest says where the backup ends (a standby writes no backup
	// history file); without one, the history file the primary archived
	// before pg_basebackup returned says it.
	if facts.endLSN != "" {
		b.EndLSN = facts.endLSN
	} else if b.EndLSN, err = stopLSN(ctx, st, prefix, b, keys); err != nil {
		return b, err
	}
	// Once more: the archive is claimed by now (its WAL is there), by the
	// archiver of the cluster that wrote it.
	if err := errors.Join(checkArchived(ctx, st, prefix, b, keys), checkOwner(ctx, st, prefix, b)); err != nil {
		_ = st.Delete(ctx, baseKey(prefix, id, baseData))
		return b, err
	}
	b.Finished, b.Size, b.SHA256 = time.Now().UTC(), size.N, hex.EncodeToString(sum.Sum(nil))
	if b, err = b.sealed(keys.Seal); err != nil {
		return b, err
	}
	data, err := json.Marshal(b)
	if err != nil {
		return b, err
	}
	if err := st.Put(ctx, baseKey(prefix, id, baseManifest), bytes.NewReader(data)); err != nil {
		return b, fmt.Errorf("failed to store the manifest of base backup %s: %w", id, err)
	}
	return b, nil
}

// checkArchived fails unless the archive holds every segment base backup b
// needs to become consistent, from its start to its end. The server waits
// only for the last one; a standby's backup starts at its last
// restartpoint, whose segment it may never have archived (it came with the
// standby's own clone), and such a backup would never restore.
// With a seal key, each of them must verify: a segment archived unsealed
// (by an instance not given the key) would stop the recovery.
func checkArchived(ctx context.Context, st backup.Storage, prefix string, b BaseBackup, keys backup.Keys) error {
	var hi, lo uint64
	if _, err := fmt.Sscanf(b.EndLSN, "%X/%X", &hi, &lo); err != nil {
		return fmt.Errorf("base backup %s: invalid end LSN %q", b.ID, b.EndLSN)
	}
	end := hi<<32 + lo
	names, err := st.List(ctx, prefix+"wal/")
	if err != nil {
		return fmt.Errorf("failed to list the WAL archive: %w", err)
	}
	stored := map[string]bool{}
	for _, k := range names {
		stored[strings.TrimSuffix(path.Base(k), suffix)] = true
	}
	for seg := b.StartWAL; SegmentStart(seg, 16<<20) < end; seg = NextSegment(seg, 0) {
		if !stored[seg] {
			return fmt.Errorf("base backup %s needs WAL segment %s (from %s to %s), which the archive does not hold: "+
				"the backup would never restore", b.ID, seg, b.StartLSN, b.EndLSN)
		}
		if len(keys.Seal) > 0 {
			if _, err := fetch(ctx, st, seg, Key(prefix, seg), keys); err != nil {
				return fmt.Errorf("base backup %s needs WAL segment %s, which fails its check: %w", b.ID, seg, err)
			}
		}
	}
	return nil
}

// checkOwner fails with ErrOtherCluster when the WAL archive under prefix
// holds another cluster than the one base backup b copies (an archive
// nobody claimed yet holds none).
func checkOwner(ctx context.Context, st backup.Storage, prefix string, b BaseBackup) error {
	owner, err := archiveOwner(ctx, st, prefix)
	if err != nil || owner == "" || owner == b.SystemIdentifier {
		return err
	}
	return fmt.Errorf("%w: base backup %s copies system %q, the WAL archive under %s holds %q (two Databases given one prefix?)",
		ErrOtherCluster, b.ID, b.SystemIdentifier, prefix, owner)
}

// systemIdentifier asks src which cluster it serves (IDENTIFY_SYSTEM over
// the replication protocol, as pg_basebackup connects).
func systemIdentifier(ctx context.Context, src Source) (string, error) {
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=replication replication=true connect_timeout=10",
		src.Host, src.Port, src.User))
	if err != nil {
		return "", err
	}
	cfg.Password = src.Password
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	res, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
	if err != nil {
		return "", err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 1 {
		return "", errors.New("IDENTIFY_SYSTEM answered no row")
	}
	return string(res[0].Rows[0][0]), nil
}

// tarFacts are what a base backup's tar says about it.
type tarFacts struct {
	// label is its backup_label; endLSN the end of the last WAL range in
	// its backup_manifest.
	label, endLSN string
}

// readFacts reads a base backup's tar for its backup_label and manifest.
func readFacts(r io.Reader) tarFacts {
	var f tarFacts
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return f
		}
		switch h.Name {
		case "backup_label":
			b, _ := io.ReadAll(io.LimitReader(tr, 64<<10))
			f.label = string(b)
		case "backup_manifest":
			var m struct {
				WALRanges []struct {
					EndLSN string `json:"End-LSN"`
				} `json:"WAL-Ranges"`
			}
			if json.NewDecoder(tr).Decode(&m) == nil && len(m.WALRanges) > 0 {
				f.endLSN = m.WALRanges[len(m.WALRanges)-1].EndLSN
			}
		}
	}
}

// stopLSN reads where base backup b ends from the backup history file the
// server archived (<start segment>.<offset>.backup).
func stopLSN(ctx context.Context, st backup.Storage, prefix string, b BaseBackup, keys backup.Keys) (string, error) {
	var hi, lo uint64
	if _, err := fmt.Sscanf(b.StartLSN, "%X/%X", &hi, &lo); err != nil {
		return "", fmt.Errorf("invalid start LSN %q", b.StartLSN)
	}
	name := fmt.Sprintf("%s.%08X.backup", b.StartWAL, lo%(16<<20))
	data, err := fetch(ctx, st, name, Key(prefix, name), keys)
	if err != nil {
		return "", fmt.Errorf("base backup %s: its history file %s is not in the archive: %w", b.ID, name, err)
	}
	m := stopPoint.FindStringSubmatch(string(data))
	if m == nil {
		return "", fmt.Errorf("base backup %s: %s names no stop location", b.ID, name)
	}
	return m[1], nil
}

// FindBase reads base backup id's manifest, which must verify under the
// series key (when set).
func FindBase(ctx context.Context, st backup.Storage, prefix, id string, keys backup.Keys) (BaseBackup, error) {
	b, err := readBase(ctx, st, prefix, id)
	if err != nil {
		return b, err
	}
	if b.ID != id {
		return b, fmt.Errorf("base backup %s's manifest names %s: %w", id, b.ID, backup.ErrUnauthenticated)
	}
	switch ok, err := b.trusted(keys.Seal); {
	case err != nil:
		return b, err
	case !ok:
		return b, fmt.Errorf("base backup %s has no MAC: %w (taken before the series had a key)", id, backup.ErrUnauthenticated)
	}
	return b, nil
}

func readBase(ctx context.Context, st backup.Storage, prefix, id string) (BaseBackup, error) {
	var b BaseBackup
	r, err := st.Get(ctx, baseKey(prefix, id, baseManifest))
	if err != nil {
		return b, fmt.Errorf("base backup %s: %w", id, err)
	}
	defer func() { _ = r.Close() }()
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&b); err != nil {
		return b, fmt.Errorf("base backup %s has an unreadable manifest: %w", id, err)
	}
	return b, nil
}

// ErrChecksum means stored data does not match its manifest.
var ErrChecksum = errors.New("checksum mismatch")

// ExtractBase writes base backup b into the empty directory dir, refusing
// a copy whose checksum does not match the manifest's.
func ExtractBase(ctx context.Context, st backup.Storage, prefix string, b BaseBackup, dir string, keys backup.Keys) error {
	if err := checkOwner(ctx, st, prefix, b); err != nil {
		return err
	}
	r, err := st.Get(ctx, baseKey(prefix, b.ID, baseData))
	if err != nil {
		return fmt.Errorf("base backup %s: %w", b.ID, err)
	}
	defer func() { _ = r.Close() }()
	sum := sha256.New()
	stored := io.TeeReader(bufio.NewReaderSize(r, 1<<20), sum)
	plain, err := backup.DecryptReader(keys.Encrypt, stored, b.Encrypted)
	if err != nil {
		return fmt.Errorf("base backup %s: %w", b.ID, err)
	}
	dec, err := zstd.NewReader(plain)
	if err != nil {
		return err
	}
	defer dec.Close()
	if err := untar(tar.NewReader(dec), dir); err != nil {
		return fmt.Errorf("base backup %s: %w", b.ID, err)
	}
	// The tar's end marker may come before the stream's: read to the end,
	// so the checksum covers every stored byte.
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return fmt.Errorf("base backup %s is corrupt: %w", b.ID, err)
	}
	if _, err := io.Copy(io.Discard, stored); err != nil {
		return fmt.Errorf("base backup %s: %w", b.ID, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != b.SHA256 {
		return fmt.Errorf("base backup %s: %w: stored %s, manifest %s", b.ID, ErrChecksum, got, b.SHA256)
	}
	return nil
}

// untar writes regular files and directories below dir, refusing names
// that would leave it.
func untar(tr *tar.Reader, dir string) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("corrupt: %w", err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("refusing %q: outside the data directory", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(p, tr, os.FileMode(h.Mode)&0o600|0o600); err != nil {
				return err
			}
		default:
			return fmt.Errorf("refusing %q: type %c (tablespaces are not supported)", h.Name, h.Typeflag)
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write %s: %w", p, err)
	}
	return f.Close()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// ListBases returns the base backups under prefix that have a manifest
// (a backup without one never finished) and copy the cluster whose WAL the
// archive holds (ClaimArchive), oldest first: another cluster's, stored
// under the same prefix, is neither restored nor pruned. With a seal key,
// only those whose manifest verifies under it (one a bucket writer added
// must not stop a recovery from the others); without one, all of them.
func ListBases(ctx context.Context, st backup.Storage, prefix string, keys backup.Keys) ([]BaseBackup, error) {
	names, err := st.List(ctx, prefix+"base/")
	if err != nil {
		return nil, fmt.Errorf("failed to list base backups: %w", err)
	}
	owner, err := archiveOwner(ctx, st, prefix)
	if err != nil {
		return nil, err
	}
	var out []BaseBackup
	for _, k := range names {
		rest, ok := strings.CutPrefix(k, prefix+"base/")
		id, file, _ := strings.Cut(rest, "/")
		if !ok || file != baseManifest {
			continue
		}
		b, err := readBase(ctx, st, prefix, id)
		if err != nil || b.ID != id || !segmentName.MatchString(b.StartWAL) {
			continue // not one daytwo wrote there: it restores nothing, and stops nothing
		}
		trusted, err := b.trusted(keys.Seal)
		if err == nil && trusted && (owner == "" || b.SystemIdentifier == owner) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(x, y BaseBackup) int { return x.Finished.Compare(y.Finished) })
	return out, nil
}

// ChooseBase picks the newest base backup that is consistent before the
// recovery target: finished before targetTime, or ended at or before
// targetLSN; with neither, the newest.
func ChooseBase(bases []BaseBackup, targetTime time.Time, targetLSN string) (BaseBackup, bool) {
	target, lsnTarget := postgres.ParseLSN(targetLSN)
	for i := len(bases) - 1; i >= 0; i-- {
		b := bases[i]
		end, ok := postgres.ParseLSN(b.EndLSN)
		switch {
		case !ok:
			continue
		case !targetTime.IsZero() && !b.Finished.Before(targetTime):
			continue
		case lsnTarget && end > target:
			continue
		}
		return b, true
	}
	return BaseBackup{}, false
}

// ArchiveEnd is the end of the newest WAL segment archived under prefix,
// on the newest timeline, for segments of segmentSize bytes (16 MiB when
// 0); 0 when none is.
func ArchiveEnd(ctx context.Context, st backup.Storage, prefix string, segmentSize int64) (uint64, error) {
	if segmentSize <= 0 {
		segmentSize = 16 << 20
	}
	newest, err := newestSegment(ctx, st, prefix)
	if err != nil || newest == "" {
		return 0, err
	}
	return SegmentStart(newest, segmentSize) + uint64(segmentSize), nil
}

// newestSegment is the name of the newest WAL segment archived under
// prefix, on the newest timeline; "" when none is.
func newestSegment(ctx context.Context, st backup.Storage, prefix string) (string, error) {
	keys, err := st.List(ctx, prefix+"wal/")
	if err != nil {
		return "", fmt.Errorf("failed to list the WAL archive: %w", err)
	}
	newest := ""
	for _, k := range keys {
		name := strings.TrimSuffix(path.Base(k), suffix)
		if segmentName.MatchString(name) && name > newest {
			newest = name
		}
	}
	return newest, nil
}

// Recoverability is the window a point-in-time recovery from the base
// backups kept (newest first) can reach: from the end of the oldest to
// when the newest WAL segment was stored, if that is later than the newest
// base backup's end. The archive holds every transaction committed until
// that segment was completed, a moment before it was stored; later ones
// are in the segment being written, archived at most archive_timeout on.
func Recoverability(ctx context.Context, st backup.Storage, prefix string, kept []backup.Manifest) (*backup.Window, error) {
	w := backup.WindowOf(kept)
	if w == nil {
		return nil, nil
	}
	newest, err := newestSegment(ctx, st, prefix)
	if err != nil || newest == "" {
		return w, err
	}
	stored, err := st.Modified(ctx, Key(prefix, newest))
	if err != nil {
		return w, fmt.Errorf("failed to read when WAL segment %s was stored: %w", newest, err)
	}
	if stored.After(w.Last) {
		w.Last = stored.UTC()
	}
	return w, nil
}

// SegmentStart is the LSN where segment name begins.
func SegmentStart(name string, segmentSize int64) uint64 {
	log, _ := strconv.ParseUint(name[8:16], 16, 32)
	seg, _ := strconv.ParseUint(name[16:24], 16, 32)
	return log<<32 + seg*uint64(segmentSize)
}

// BaseDataKey is where base backup id's data is stored.
func BaseDataKey(prefix, id string) string { return baseKey(prefix, id, baseData) }

// PruneArchive deletes the base backups named in drop, and the WAL that
// none of the base backups left under prefix needs (whatever series took
// them): every segment (of any timeline) before the oldest one's first,
// and the backup history files among them. Timeline history files stay:
// they are small, and recovery reads them to find its way across
// failovers. With no base backup left it deletes no WAL.
func PruneArchive(ctx context.Context, st backup.Storage, prefix string, drop []string) (bases, segments int, err error) {
	// Every base backup, trusted or not: the WAL one needs is not
	// retention's to delete.
	all, err := ListBases(ctx, st, prefix, backup.Keys{})
	if err != nil {
		return 0, 0, err
	}
	oldest := ""
	for _, b := range all {
		if slices.Contains(drop, b.ID) {
			// The manifest goes first: a base backup without it is never chosen.
			for _, f := range []string{baseManifest, baseData} {
				if err := st.Delete(ctx, baseKey(prefix, b.ID, f)); err != nil {
					return bases, segments, err
				}
			}
			bases++
			continue
		}
		if oldest == "" || b.StartWAL[8:] < oldest {
			oldest = b.StartWAL[8:]
		}
	}
	if oldest == "" {
		return bases, 0, nil
	}
	keys, err := st.List(ctx, prefix+"wal/")
	if err != nil {
		return bases, segments, fmt.Errorf("failed to list the WAL archive: %w", err)
	}
	// The first segment of the newest timeline after the first stays: it
	// holds the switchpoint, where a Database demoted in favour of this
	// one (a planned switch) continues onto this timeline, though the
	// first base backup on it starts later.
	first := ""
	for _, k := range keys {
		seg, _, _ := strings.Cut(strings.TrimSuffix(path.Base(k), suffix), ".")
		if segmentName.MatchString(seg) && (first == "" || seg[:8] > first[:8] || seg[:8] == first[:8] && seg < first) {
			first = seg
		}
	}
	if first != "" && first[:8] == "00000001" {
		first = ""
	}
	for _, k := range keys {
		name := strings.TrimSuffix(path.Base(k), suffix)
		seg, _, _ := strings.Cut(name, ".")
		if !segmentName.MatchString(seg) || seg[8:] >= oldest || (seg == first && name == seg) {
			continue
		}
		if err := st.Delete(ctx, k); err != nil {
			return bases, segments, err
		}
		segments++
	}
	return bases, segments, nil
}
