// Package wal ships PostgreSQL's write-ahead log to backup storage and
// fetches it back: each file compressed with zstd, whose frame checksum
// (xxhash64 of the content) refuses a corrupted copy on the way back, and
// stored at most once. An Archiver, run by a primary's instance manager,
// ships the segments PostgreSQL has finished several at a time, ahead of
// archive_command, which then only waits for its own segment.
package wal

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/daytwo-dev/daytwo/internal/backup"
)

// suffix is the stored name's ending: a zstd frame.
const suffix = ".zst"

var (
	// segmentName is a WAL segment: timeline, log and segment, 8 hex each.
	segmentName = regexp.MustCompile(`^[0-9A-F]{24}$`)
	// otherName is a timeline history file, or a base backup's label
	// (segment.offset.backup), or a partial segment left by a promotion.
	otherName = regexp.MustCompile(`^([0-9A-F]{8}\.history|[0-9A-F]{24}\.[0-9A-F]{8}\.backup|[0-9A-F]{24}\.partial|[0-9A-F]{24}\.demoted)$`)
)

// ValidName says whether name is a file PostgreSQL archives.
func ValidName(name string) bool { return segmentName.MatchString(name) || otherName.MatchString(name) }

// Key is where name is stored under prefix: segments grouped by timeline
// and log (256 segments at most per group), other files beside the groups.
func Key(prefix, name string) string {
	if segmentName.MatchString(name) {
		return prefix + "wal/" + name[:16] + "/" + name + suffix
	}
	return prefix + "wal/" + name + suffix
}

// ErrDifferent means the archive already holds another file by that name:
// two servers wrote the same timeline, and the archive keeps the first.
var ErrDifferent = errors.New("the archive already holds a different file by that name")

// Push stores the file at path under prefix as its base name, sealed with
// the series key (none without one; see seal). A file already stored with
// the same content is success (PostgreSQL archives a file again after a
// crash); different content is ErrDifferent.
func Push(ctx context.Context, st backup.Storage, prefix, path string, keys backup.Keys) error {
	return push(ctx, st, prefix, path, keys, false)
}

// PushCopy is Push for a replica's copy of its primary's WAL: a file
// already stored counts as archived, unread. A completed segment or a
// history file streamed from the primary is the primary's own, so reading
// it back to compare would only cost a download per file and replica.
func PushCopy(ctx context.Context, st backup.Storage, prefix, path string, keys backup.Keys) error {
	return push(ctx, st, prefix, path, keys, true)
}

func push(ctx context.Context, st backup.Storage, prefix, path string, keys backup.Keys, trustStored bool) error {
	name := filepath.Base(path)
	if !ValidName(name) {
		return fmt.Errorf("%q is not a WAL file name", name)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", name, err)
	}
	key := Key(prefix, name)
	if _, err := st.Size(ctx, key); err == nil {
		if trustStored {
			return nil
		}
		// The content is compared, not its seal: a copy stored before the
		// series had a key is the same file. It is stored again, sealed
		// and encrypted as the keys say, unless it already is: a recovery
		// would refuse it.
		stored, err := readStored(ctx, st, key)
		var content []byte
		if err == nil {
			content, err = decode(name, key, stored, backup.Keys{Encrypt: keys.Encrypt})
		}
		if err != nil {
			return fmt.Errorf("failed to compare %s with the stored copy: %w", name, err)
		}
		if sha256.Sum256(content) != sha256.Sum256(data) {
			return fmt.Errorf("%s: %w", name, ErrDifferent)
		}
		if storedAsKeysSay(name, stored, keys) {
			return nil
		}
	} else if !errors.Is(err, backup.ErrNotFound) {
		return fmt.Errorf("failed to look for %s in the archive: %w", name, err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	defer func() { _ = enc.Close() }()
	frame, err := backup.Encrypt(keys.Encrypt, enc.EncodeAll(data, make([]byte, 0, len(data)/4)))
	if err != nil {
		return fmt.Errorf("failed to encrypt %s: %w", name, err)
	}
	if err := st.Put(ctx, key, bytes.NewReader(seal(keys.Seal, name, frame))); err != nil {
		return fmt.Errorf("failed to archive %s: %w", name, err)
	}
	return nil
}

// ErrOtherCluster means the archive under a prefix holds another
// PostgreSQL cluster's WAL.
var ErrOtherCluster = errors.New("the WAL archive belongs to another PostgreSQL cluster")

// claimKey names the cluster whose WAL an archive holds.
func claimKey(prefix string) string { return prefix + "archive.json" }

// archiveClaim is what claimKey holds.
type archiveClaim struct {
	SystemIdentifier string    `json:"systemIdentifier"`
	ClaimedBy        string    `json:"claimedBy,omitempty"`
	Claimed          time.Time `json:"claimed"`
}

// ClaimArchive makes sure the archive under prefix holds the WAL of the
// cluster with systemID (pg_controldata's "Database system identifier",
// which a base backup and its restores share): it records systemID if the
// archive names no cluster yet, and fails with ErrOtherCluster if it names
// another. Without it, a cluster made again under the same name and
// prefix would find its first segments' names taken by the old cluster's
// and fail on every one with ErrDifferent, a message nobody understands.
func ClaimArchive(ctx context.Context, st backup.Storage, prefix, systemID, by string) error {
	if systemID == "" {
		return errors.New("no system identifier to claim the WAL archive with")
	}
	data, err := fetchPlain(ctx, st, claimKey(prefix))
	switch {
	case errors.Is(err, backup.ErrNotFound):
		// Two first claimants at once can each find none; the later write
		// wins, and the other's next push or base backup is refused.
		b, err := json.Marshal(archiveClaim{SystemIdentifier: systemID, ClaimedBy: by, Claimed: time.Now().UTC()})
		if err != nil {
			return err
		}
		if err := st.Put(ctx, claimKey(prefix), bytes.NewReader(b)); err != nil {
			return fmt.Errorf("failed to record the cluster in the WAL archive: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("failed to read which cluster the WAL archive holds: %w", err)
	}
	var c archiveClaim
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%s is not valid: %w", claimKey(prefix), err)
	}
	if c.SystemIdentifier != systemID {
		return fmt.Errorf("%w: %s names system identifier %s (claimed by %s at %s), this server is %s; "+
			"an earlier Database of the same name? Give the backup storage another prefix, or move the old archive away",
			ErrOtherCluster, claimKey(prefix), c.SystemIdentifier, c.ClaimedBy, c.Claimed.Format(time.RFC3339), systemID)
	}
	return nil
}

// archiveOwner is the system identifier the archive under prefix holds
// ("" before any cluster claimed it).
func archiveOwner(ctx context.Context, st backup.Storage, prefix string) (string, error) {
	data, err := fetchPlain(ctx, st, claimKey(prefix))
	if errors.Is(err, backup.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("failed to read which cluster the WAL archive holds: %w", err)
	}
	var c archiveClaim
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("%s is not valid: %w", claimKey(prefix), err)
	}
	return c.SystemIdentifier, nil
}

func fetchPlain(ctx context.Context, st backup.Storage, key string) ([]byte, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	return io.ReadAll(io.LimitReader(rc, 64<<10))
}

// ErrNotArchived means the archive does not hold the file asked for: the
// normal answer past the archive's end.
var ErrNotArchived = errors.New("not in the archive")

// Fetch writes the archived file name to dest, atomically: restore_command
// must never leave PostgreSQL a partial file. With a series key, a file
// whose seal does not verify is refused (ErrUnauthenticated).
func Fetch(ctx context.Context, st backup.Storage, prefix, name, dest string, keys backup.Keys) error {
	if !ValidName(name) {
		return fmt.Errorf("%q is not a WAL file name", name)
	}
	key := Key(prefix, name)
	if _, err := st.Size(ctx, key); errors.Is(err, backup.ErrNotFound) {
		return fmt.Errorf("%s: %w", name, ErrNotArchived)
	} else if err != nil {
		return fmt.Errorf("failed to look for %s in the archive: %w", name, err)
	}
	data, err := fetch(ctx, st, name, key, keys)
	if err != nil {
		return fmt.Errorf("failed to fetch %s: %w", name, err)
	}
	return writeAtomic(dest, data)
}

// storedAsKeysSay says whether stored, name's stored copy, is sealed (with
// a seal key) and encrypted (with an encryption key) as keys say.
func storedAsKeysSay(name string, stored []byte, keys backup.Keys) bool {
	frame, err := unseal(keys.Seal, name, stored)
	return err == nil && (len(keys.Encrypt) == 0 || backup.IsEncrypted(frame))
}

func readStored(ctx context.Context, st backup.Storage, key string) ([]byte, error) {
	r, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	stored, err := io.ReadAll(io.LimitReader(r, maxStored))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", key, err)
	}
	return stored, nil
}

// maxStored bounds what fetch reads of one stored file: a segment is at
// most 1 GiB (wal_segment_size), and zstd does not make it larger.
const maxStored = 1<<30 + 1<<20

// fetch reads the file name stored at key, checks its seal (with a seal
// key), decrypts it (when it is encrypted) and decompresses it, refusing
// a copy whose checksum fails.
func fetch(ctx context.Context, st backup.Storage, name, key string, keys backup.Keys) ([]byte, error) {
	stored, err := readStored(ctx, st, key)
	if err != nil {
		return nil, err
	}
	return decode(name, key, stored, keys)
}

// decode is fetch on the stored bytes of name (at key).
func decode(name, key string, stored []byte, keys backup.Keys) ([]byte, error) {
	frame, err := unseal(keys.Seal, name, stored)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if frame, err = backup.Decrypt(keys.Encrypt, frame); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	data, err := dec.DecodeAll(frame, nil)
	if err != nil {
		return nil, fmt.Errorf("%s is corrupt: %w", key, err)
	}
	return data, nil
}

// A sealed WAL file is its zstd frame (encrypted, with an encryption key)
// followed by a zstd skippable frame (which decoders pass over, so a
// reader without the key reads an unencrypted one as before) holding
// sealTag and the HMAC-SHA256, under the series key, of the file's name
// and the frame before it: a file changed, or put in another's place,
// fails.
const sealMagic = 0x184D2A5E

var sealTag = []byte("daytwo-wal-mac-v1")

// sealDomain is what a WAL file's MAC authenticates.
const sealDomain = "daytwo wal v1"

// sealLen is the size of a seal: the skippable frame's header, the tag
// and the MAC.
var sealLen = 8 + len(sealTag) + sha256.Size

// seal appends the seal of name's frame under key (nothing without one).
func seal(key []byte, name string, frame []byte) []byte {
	if len(key) == 0 {
		return frame
	}
	out := binary.LittleEndian.AppendUint32(frame, sealMagic)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(sealTag)+sha256.Size))
	out = append(out, sealTag...)
	return append(out, backup.MAC(key, sealDomain, []byte(name), frame)...)
}

// unseal returns the frame of name's stored copy, once its seal verifies
// under key; without a key, the frame, its seal (if any) unread.
func unseal(key []byte, name string, stored []byte) ([]byte, error) {
	n := len(stored) - sealLen
	sealed := n >= 0 && binary.LittleEndian.Uint32(stored[n:]) == sealMagic &&
		binary.LittleEndian.Uint32(stored[n+4:]) == uint32(len(sealTag)+sha256.Size) &&
		bytes.Equal(stored[n+8:n+8+len(sealTag)], sealTag)
	switch {
	case len(key) == 0 && sealed:
		return stored[:n], nil
	case len(key) == 0:
		return stored, nil
	case !sealed:
		return nil, fmt.Errorf("no seal: %w (stored before the series had a key, or stripped)", backup.ErrUnauthenticated)
	}
	frame := stored[:n]
	if !hmac.Equal(stored[n+8+len(sealTag):], backup.MAC(key, sealDomain, []byte(name), frame)) {
		return nil, fmt.Errorf("the seal does not verify: %w (changed in the bucket, or sealed with another key)", backup.ErrUnauthenticated)
	}
	return frame, nil
}

func writeAtomic(dest string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("failed to write %s: %w", dest, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

// readyName is the segment a ".ready" status file announces.
func readyName(status string) (string, bool) {
	name, ok := strings.CutSuffix(status, ".ready")
	return name, ok && ValidName(name)
}
