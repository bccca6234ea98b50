package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Manifest describes one complete backup. It is written last: a backup
// without a manifest does not exist for listing, retention or restore.
type Manifest struct {
	// MAC authenticates the rest under the series key (seal.go); empty
	// without one.
	MAC      string `json:"mac,omitempty"`
	ID       string `json:"id"`
	Database string `json:"database"`
	// Series is the UID of the DatabaseBackup that took the backup, and
	// SeriesName its namespace/name. Empty in backups taken before daytwo
	// recorded series.
	Series     string `json:"series,omitempty"`
	SeriesName string `json:"seriesName,omitempty"`
	PGVersion  string `json:"pgVersion"`
	Method     string `json:"method"`
	Format     string `json:"format"`
	DataKey    string `json:"dataKey"`
	// Encrypted says the data and roles are encrypted (crypt.go).
	Encrypted bool `json:"encrypted,omitempty"`
	// Compression is how the data and roles are compressed in storage
	// (none, gzip or zstd); empty in backups pg_dump compressed itself.
	Compression string `json:"compression,omitempty"`
	// RawBytes is what pg_dump wrote, before compression.
	RawBytes int64 `json:"rawBytes,omitempty"`
	// Owner is the role that took a logical backup: the owner of the
	// application database. A restore for another owner hands it the objects.
	Owner string `json:"owner,omitempty"`
	// Roles is the cluster's roles (pg_dumpall --roles-only), so a restore
	// brings back the roles that own objects; RolePasswords says whether
	// their password verifiers are in it (backups before it have none).
	Roles         *Part `json:"roles,omitempty"`
	RolePasswords bool  `json:"rolePasswords,omitempty"`
	// Databases are the other databases of the server (all but the one
	// the backup connected to, the templates and postgres), each dumped
	// on its own; a restore brings them back under their names.
	Databases     []DatabasePart `json:"databases,omitempty"`
	Start         time.Time      `json:"start"`
	End           time.Time      `json:"end"`
	Bytes         int64          `json:"bytes"`
	SHA256        string         `json:"sha256"`
	DaytwoVersion string         `json:"daytwoVersion"`
}

// DatabasePart is one more database of a logical backup.
type DatabasePart struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Part
}

// dataPart is the main database's dump, as a Part.
func (m Manifest) dataPart() Part {
	return Part{Key: m.DataKey, Bytes: m.Bytes, RawBytes: m.RawBytes, SHA256: m.SHA256}
}

// parts are the stored objects a manifest names besides itself.
func (m Manifest) parts() []Part {
	parts := []Part{m.dataPart()}
	if m.Roles != nil {
		parts = append(parts, *m.Roles)
	}
	for _, d := range m.Databases {
		parts = append(parts, d.Part)
	}
	return parts
}

// keys are the keys of the stored objects a manifest names besides itself.
func (m Manifest) keys() []string {
	var keys []string
	for _, p := range m.parts() {
		keys = append(keys, p.Key)
	}
	return keys
}

// Manifest methods.
const (
	MethodLogical  = "Logical"
	MethodPhysical = "Physical"
)

const (
	manifestSuffix = ".manifest.json"
	dataSuffix     = ".dump"
	rolesSuffix    = ".roles" + dataSuffix
	// IDLayout is how backup IDs are written: UTC, sortable, no colons.
	IDLayout = "20060102T150405Z"
)

// ErrNoBackup means no complete backup exists (under a prefix, or with an ID).
var ErrNoBackup = errors.New("no complete backup found")

// NewID names a backup taken at t.
func NewID(t time.Time) string { return t.UTC().Format(IDLayout) }

// Series identifies one DatabaseBackup's backups, so series that share a
// location (a bucket and prefix) never list, prune or restore each other's.
type Series struct {
	// UID is the DatabaseBackup's metadata.uid; it is part of every key.
	UID string
	// Name is the DatabaseBackup's namespace/name, for people reading the bucket.
	Name string
	// Database is the name of the Database the series backs up.
	Database string
	// Key, when set, authenticates the series' manifests (seal.go).
	// KeyMissing says a key was required and none was given: then nothing
	// is trusted (a restore whose key Secret is gone must not run
	// unauthenticated).
	Key        []byte
	KeyMissing bool
	// EncryptionKey, when set, encrypts what the series stores (crypt.go).
	EncryptionKey []byte
}

// tag is what a series adds to its keys.
func (s Series) tag() string {
	if s.UID == "" {
		return ""
	}
	return "." + s.UID
}

// owns reports whether m belongs to s. Backups from before series were
// recorded belong to a series of the same database for listing and
// restore (strict is false), never for pruning.
func (s Series) owns(m Manifest, strict bool) bool {
	switch {
	case m.Series != "":
		return m.Series == s.UID
	case strict && s.UID != "":
		return false
	default:
		return s.Database == "" || m.Database == s.Database
	}
}

// dataKey is unique per attempt: a retried Job never overwrites or deletes
// what an earlier attempt stored.
func dataKey(prefix, id string, s Series) string {
	nonce := make([]byte, 4)
	_, _ = rand.Read(nonce)
	return prefix + id + s.tag() + "." + hex.EncodeToString(nonce) + dataSuffix
}

func manifestKey(prefix, id string, s Series) string { return prefix + id + s.tag() + manifestSuffix }

// NormalizePrefix makes a prefix end in exactly one slash (or be empty).
func NormalizePrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return p + "/"
}

// Record writes the manifest of a backup whose data another package
// stored (a physical base backup): from then on it counts for listing,
// retention and status like any other.
func Record(ctx context.Context, st Storage, prefix string, s Series, m Manifest) error {
	_, err := writeManifest(ctx, st, prefix, s, m)
	return err
}

// writeManifest stores m sealed with s's key, and returns what it stored.
func writeManifest(ctx context.Context, st Storage, prefix string, s Series, m Manifest) (Manifest, error) {
	m, err := s.seal(m)
	if err != nil {
		return m, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	return m, st.Put(ctx, manifestKey(prefix, m.ID, s), strings.NewReader(string(b)))
}

// List returns the complete backups of series s under prefix, newest first.
func List(ctx context.Context, st Storage, prefix string, s Series) ([]Manifest, error) {
	l, err := list(ctx, st, prefix, s, false)
	return l.trusted, err
}

// listing is what list found of a series.
type listing struct {
	// trusted are the backups, newest first.
	trusted []Manifest
	// untrusted are the manifests of the series that are not: without a
	// MAC under a key, or refused (say why). Nothing they name is
	// restored, and nothing they name is deleted either.
	untrusted []Manifest
	refused   []error
}

// list reads the manifests of s under prefix. With a series key, a
// manifest counts only where daytwo stored it (at its own ID's key, its
// parts under prefix: a copy of a good manifest put at the next run's key
// or under another prefix would otherwise stand for a backup) and when
// its MAC verifies; one that fails is refused, not an error, so an object
// a bucket writer adds cannot stop every restore and prune.
func list(ctx context.Context, st Storage, prefix string, s Series, strict bool) (listing, error) {
	var l listing
	keys, err := st.List(ctx, prefix)
	if err != nil {
		return l, err
	}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		if !strings.HasSuffix(rest, manifestSuffix) || strings.Contains(rest, "/") {
			continue
		}
		m, err := readManifest(ctx, st, k)
		if err != nil {
			return l, err
		}
		if !s.owns(m, strict) {
			continue
		}
		ok, err := s.trusted(m, k)
		if err == nil && ok && len(s.Key) > 0 && !m.storedAt(prefix, k) {
			err = fmt.Errorf("manifest %s %w: it names backup %s, stored elsewhere", k, ErrUnauthenticated, m.ID)
		}
		switch {
		case err != nil:
			l.untrusted, l.refused = append(l.untrusted, m), append(l.refused, err)
		case ok:
			l.trusted = append(l.trusted, m)
		default:
			l.untrusted = append(l.untrusted, m)
		}
	}
	slices.SortFunc(l.trusted, func(a, b Manifest) int { return strings.Compare(b.ID, a.ID) })
	return l, nil
}

// storedAt says whether m is where daytwo stores it under prefix: at key,
// its own ID's manifest key, with every part under prefix.
func (m Manifest) storedAt(prefix, key string) bool {
	if key != manifestKey(prefix, m.ID, Series{UID: m.Series}) {
		return false
	}
	for _, k := range m.keys() {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
	}
	return true
}

func readManifest(ctx context.Context, st Storage, key string) (Manifest, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return Manifest{}, err
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return Manifest{}, fmt.Errorf("failed to read %s: %w", key, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest %s is not valid: %w", key, err)
	}
	return m, nil
}

// Find returns series s's backup with id, or its newest when id is empty.
// A manifest refused on the way is named in the error when none is found.
func Find(ctx context.Context, st Storage, prefix string, s Series, id string) (Manifest, error) {
	l, err := list(ctx, st, prefix, s, false)
	if err != nil {
		return Manifest{}, err
	}
	for _, m := range l.trusted {
		if id == "" || m.ID == id {
			return m, nil
		}
	}
	err = ErrNoBackup
	if id != "" {
		err = fmt.Errorf("%w with ID %s", ErrNoBackup, id)
	}
	return Manifest{}, errors.Join(append([]error{err}, l.refused...)...)
}

// Summary is one backup as the status lists it.
type Summary struct {
	ID        string    `json:"id"`
	End       time.Time `json:"end"`
	Bytes     int64     `json:"bytes"`
	SHA256    string    `json:"sha256"`
	PGVersion string    `json:"pgVersion,omitempty"`
}

// Summaries returns at most n summaries of ms, in order.
func Summaries(ms []Manifest, n int) []Summary {
	out := make([]Summary, 0, min(n, len(ms)))
	for _, m := range ms[:min(n, len(ms))] {
		out = append(out, Summary{ID: m.ID, End: m.End, Bytes: m.Bytes, SHA256: m.SHA256, PGVersion: m.PGVersion})
	}
	return out
}

// Elapsed is the seconds from start to end, 0 unless both are known and
// in order: a run that failed before it started or ended has no duration
// (a zero time would report -9223372036.85 s).
func Elapsed(start, end time.Time) float64 {
	if start.IsZero() || end.IsZero() || end.Before(start) {
		return 0
	}
	return end.Sub(start).Seconds()
}

// Result is what a backup Job reports through its termination message (at
// most 4096 bytes, so the retained list is bounded). It carries no secret.
type Result struct {
	ID              string    `json:"id"`
	Bytes           int64     `json:"bytes"`
	SHA256          string    `json:"sha256"`
	PGVersion       string    `json:"pgVersion"`
	DurationSeconds float64   `json:"durationSeconds"`
	End             time.Time `json:"end"`
	Pruned          int       `json:"pruned"`
	Retained        []Summary `json:"retained"`
	// Recoverability is the span a restore from this series can reach.
	Recoverability *Window `json:"recoverability,omitempty"`
	Error          string  `json:"error,omitempty"`
}

// Window is the span a restore can reach: from the end of the oldest
// retained backup (the first consistent point) to the newest point stored.
type Window struct {
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// WindowOf is the window of the retained backups kept, nil without one:
// the points they restore to. A logical backup restores the snapshot
// pg_dump took as it started; a base backup is consistent once it ended
// (and a physical series moves Last on to its newest archived WAL).
func WindowOf(kept []Manifest) *Window {
	var w *Window
	for _, m := range kept {
		at := m.Start
		if m.Method == MethodPhysical {
			at = m.End
		}
		switch {
		case w == nil:
			w = &Window{First: at, Last: at}
		case at.Before(w.First):
			w.First = at
		case at.After(w.Last):
			w.Last = at
		}
	}
	return w
}
