package wal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// finishSegments makes a real PostgreSQL complete n WAL segments; with an
// archive_command that always fails, each stays announced as ready.
func finishSegments(t *testing.T, pg *testpg.Server, n int) []string {
	t.Helper()
	pg.Exec(t, "postgres", "CREATE TABLE IF NOT EXISTS filler (x text)")
	for range n {
		pg.Exec(t, "postgres", "INSERT INTO filler SELECT md5(g::text) FROM generate_series(1, 2000) g")
		pg.Exec(t, "postgres", "SELECT pg_switch_wal()")
	}
	var ready []string
	deadline := time.Now().Add(30 * time.Second)
	for len(ready) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d segments ready for archiving, want %d", len(ready), n)
		}
		time.Sleep(100 * time.Millisecond)
		entries, err := os.ReadDir(filepath.Join(pg.Dir, "data", "pg_wal", "archive_status"))
		if err != nil {
			t.Fatal(err)
		}
		ready = ready[:0]
		for _, e := range entries {
			if name, ok := strings.CutSuffix(e.Name(), ".ready"); ok {
				ready = append(ready, name)
			}
		}
	}
	return ready
}

func startArchiving(t *testing.T) *testpg.Server {
	return testpg.Start(t, "archive_mode=on", "archive_command=/bin/false", "wal_level=replica")
}

// The Archiver ships every ready segment of a real PostgreSQL to a real
// MinIO, several at a time, and each comes back byte for byte.
func TestArchiverShipsEverySegmentToMinIO(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg := startArchiving(t)
	m := testpg.StartMinIO(t)
	st, err := backup.NewS3(backup.S3Config{Endpoint: m.Endpoint, Bucket: "wal", AccessKeyID: m.AccessKey,
		SecretAccessKey: m.SecretKey, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.EnsureBucket(ctx, st); err != nil {
		t.Fatal(err)
	}
	ready := finishSegments(t, pg, 6)
	walDir := filepath.Join(pg.Dir, "data", "pg_wal")
	a := &wal.Archiver{Storage: st, Prefix: "orders/", WALDir: walDir, Parallel: 4, Log: testr.New(t)}
	go a.Run(ctx)
	// archive_command's ask for the first one joins the push under way.
	if err := a.Archive(ctx, ready[0]); err != nil {
		t.Fatalf("Archive(%s): %v", ready[0], err)
	}
	deadline := time.Now().Add(time.Minute)
	for a.Stats().Archived < len(ready) {
		if time.Now().After(deadline) {
			t.Fatalf("%+v after a minute, want %d archived", a.Stats(), len(ready))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := a.Stats(); s.Failed != 0 || s.Archived != len(ready) {
		t.Fatalf("stats %+v, want %d archived and none failed", s, len(ready))
	}
	out := t.TempDir()
	for _, name := range ready {
		want, err := os.ReadFile(filepath.Join(walDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := wal.Fetch(ctx, st, "orders/", name, filepath.Join(out, "RECOVERYXLOG"), backup.Keys{}); err != nil {
			t.Fatalf("Fetch(%s): %v", name, err)
		}
		got, err := os.ReadFile(filepath.Join(out, "RECOVERYXLOG"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s came back different (%d bytes, want %d)", name, len(got), len(want))
		}
	}
	if size, err := st.Size(ctx, wal.Key("orders/", ready[0])); err != nil || size >= 16<<20/2 {
		t.Fatalf("stored size of a mostly empty 16 MiB segment = %d (%v), want it compressed", size, err)
	}
	if err := wal.Fetch(ctx, st, "orders/", "0000000100000000000000FF", filepath.Join(out, "x"), backup.Keys{}); !errors.Is(err, wal.ErrNotArchived) {
		t.Fatalf("Fetch of a segment never archived = %v, want ErrNotArchived", err)
	}
}

// A file is stored once: the same content again is success (PostgreSQL
// archives again after a crash), different content is refused, and a
// stored copy with a flipped byte is refused on the way back.
func TestArchiveRefusesOverwritesAndCorruption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := startArchiving(t)
	ready := finishSegments(t, pg, 1)
	root := t.TempDir()
	st := backup.NewDir(root)
	src := filepath.Join(pg.Dir, "data", "pg_wal", ready[0])
	if err := wal.Push(ctx, st, "", src, backup.Keys{}); err != nil {
		t.Fatal(err)
	}
	if err := wal.Push(ctx, st, "", src, backup.Keys{}); err != nil {
		t.Fatalf("pushing the same segment again: %v", err)
	}
	other := filepath.Join(t.TempDir(), ready[0])
	testpg.FlipByte(t, src, other)
	if err := wal.Push(ctx, st, "", other, backup.Keys{}); !errors.Is(err, wal.ErrDifferent) {
		t.Fatalf("pushing different content under the same name = %v, want ErrDifferent", err)
	}

	stored := filepath.Join(root, wal.Key("", ready[0]))
	testpg.FlipByte(t, stored, stored)
	err := wal.Fetch(ctx, st, "", ready[0], filepath.Join(t.TempDir(), "RECOVERYXLOG"), backup.Keys{})
	if err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Fetch of a corrupted copy = %v, want it refused as corrupt", err)
	}
	if err := wal.Push(ctx, st, "", "/tmp/not-a-wal-file", backup.Keys{}); err == nil {
		t.Fatal("a file that is not WAL was archived")
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"000000020000000A000000FE":                 "p/wal/000000020000000A/000000020000000A000000FE.zst",
		"00000002.history":                         "p/wal/00000002.history.zst",
		"000000010000000000000002.00000028.backup": "p/wal/000000010000000000000002.00000028.backup.zst",
	} {
		if got := wal.Key("p/", name); got != want {
			t.Errorf("Key(%s) = %s, want %s", name, got, want)
		}
	}
}

// An archive is claimed by the first cluster that archives into it; the
// same cluster (or a restore of it, which keeps the system identifier)
// passes, another is refused naming both identifiers.
func TestClaimArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := backup.NewDir(t.TempDir())
	if err := wal.ClaimArchive(ctx, st, "p/", "7400000000000000001", "orders-0"); err != nil {
		t.Fatal(err)
	}
	if err := wal.ClaimArchive(ctx, st, "p/", "7400000000000000001", "orders-1"); err != nil {
		t.Fatalf("the same cluster again: %v", err)
	}
	err := wal.ClaimArchive(ctx, st, "p/", "7400000000000000002", "orders-0")
	if !errors.Is(err, wal.ErrOtherCluster) || !strings.Contains(err.Error(), "7400000000000000001") || !strings.Contains(err.Error(), "7400000000000000002") {
		t.Fatalf("another cluster: %v, want ErrOtherCluster naming both", err)
	}
	if err := wal.ClaimArchive(ctx, st, "q/", "7400000000000000002", "orders-0"); err != nil {
		t.Fatalf("another prefix: %v", err)
	}
}

// Two clusters given one prefix keep their base backups apart: a base
// backup of a cluster other than the one whose WAL the archive holds is
// refused before anything is stored, and one stored by another cluster
// all the same is neither listed (for restore or retention) nor extracted.
func TestBaseBackupsOfAnotherClusterAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testpg.Start(t, "wal_level=replica")
	st := backup.NewDir(t.TempDir())
	const other = "7400000000000000001"
	if err := wal.ClaimArchive(ctx, st, "p/", other, "orders-0"); err != nil {
		t.Fatal(err)
	}
	src := wal.Source{Host: "127.0.0.1", Port: pg.Port, User: "postgres", Password: pg.Password, BinDir: pg.BinDir}
	if _, err := wal.TakeBase(ctx, src, st, "p/", "20260101T000000Z", backup.Keys{}); !errors.Is(err, wal.ErrOtherCluster) {
		t.Fatalf("a base backup into another cluster's archive: %v, want ErrOtherCluster", err)
	}
	if keys, _ := st.List(ctx, "p/base/"); len(keys) != 0 {
		t.Fatalf("the refused base backup stored %v", keys)
	}
	// One stored anyway (by an older daytwo, or by hand) does not count.
	stray := wal.BaseBackup{ID: "20260101T000000Z", SystemIdentifier: "7400000000000000002", Finished: time.Now()}
	manifest, _ := json.Marshal(stray)
	if err := st.Put(ctx, "p/base/"+stray.ID+"/backup.json", bytes.NewReader(manifest)); err != nil {
		t.Fatal(err)
	}
	if bases, err := wal.ListBases(ctx, st, "p/", backup.Keys{}); err != nil || len(bases) != 0 {
		t.Fatalf("ListBases = %v, %v: want none of another cluster's", bases, err)
	}
	if err := wal.ExtractBase(ctx, st, "p/", stray, t.TempDir(), backup.Keys{}); !errors.Is(err, wal.ErrOtherCluster) {
		t.Fatalf("extracting another cluster's base backup: %v, want ErrOtherCluster", err)
	}
}

// With a series key, each archived file is sealed: a copy changed in the
// bucket, one put in another file's place, one sealed with another key or
// stored without a seal is refused, before recovery could replay it. A
// reader without the key reads a sealed file as before (a zstd decoder
// passes over the seal), and pushing a file the archive holds unsealed
// (from before the key) compares content, not seals.
func TestSealedWALRefusesWhatTheKeyDidNotSeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	st := backup.NewDir(root)
	key, other := []byte(strings.Repeat("k", 32)), []byte(strings.Repeat("o", 32))
	src := t.TempDir()
	names := []string{"000000010000000000000001", "000000010000000000000002", "000000010000000000000003"}
	content := map[string][]byte{}
	for i, n := range names {
		content[n] = bytes.Repeat([]byte{byte(i + 1)}, 64<<10)
		if err := os.WriteFile(filepath.Join(src, n), content[n], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := wal.Push(ctx, st, "p/", filepath.Join(src, names[0]), backup.Keys{Seal: key}); err != nil {
		t.Fatal(err)
	}
	if err := wal.Push(ctx, st, "p/", filepath.Join(src, names[1]), backup.Keys{Seal: key}); err != nil {
		t.Fatal(err)
	}
	if err := wal.Push(ctx, st, "p/", filepath.Join(src, names[2]), backup.Keys{}); err != nil { // before the key
		t.Fatal(err)
	}
	fetch := func(name string, k []byte) ([]byte, error) {
		dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
		if err := wal.Fetch(ctx, st, "p/", name, dest, backup.Keys{Seal: k}); err != nil {
			return nil, err
		}
		return os.ReadFile(dest)
	}
	if got, err := fetch(names[0], key); err != nil || !bytes.Equal(got, content[names[0]]) {
		t.Fatalf("a sealed file with its key: %d bytes, %v", len(got), err)
	}
	if got, err := fetch(names[0], nil); err != nil || !bytes.Equal(got, content[names[0]]) {
		t.Fatalf("a sealed file without a key: %d bytes, %v", len(got), err)
	}
	if _, err := fetch(names[0], other); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("a file sealed with another key: %v", err)
	}
	if _, err := fetch(names[2], key); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("an unsealed file under a key: %v", err)
	}
	if err := wal.Push(ctx, st, "p/", filepath.Join(src, names[2]), backup.Keys{Seal: key}); err != nil {
		t.Fatalf("pushing again a file the archive holds unsealed: %v", err)
	}
	if got, err := fetch(names[2], key); err != nil || !bytes.Equal(got, content[names[2]]) {
		t.Fatalf("a file pushed again under a key is not stored sealed: %v", err)
	}
	// Manifests a bucket writer adds under base/ stop no listing, no
	// prune, and a manifest in another's place is not the other.
	for id, m := range map[string]string{"junk": `{"id":"x"}`, "short": `{"id":"short"}`, "notjson": `{`} {
		if err := st.Put(ctx, "p/base/"+id+"/backup.json", strings.NewReader(m)); err != nil {
			t.Fatal(err)
		}
	}
	if bases, err := wal.ListBases(ctx, st, "p/", backup.Keys{}); err != nil || len(bases) != 0 {
		t.Fatalf("listing beside junk manifests: %v, %v", bases, err)
	}
	if _, _, err := wal.PruneArchive(ctx, st, "p/", []string{"junk"}); err != nil {
		t.Fatalf("pruning beside junk manifests: %v", err)
	}
	if _, err := wal.FindBase(ctx, st, "p/", "junk", backup.Keys{}); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("a manifest naming another backup: %v", err)
	}
	if err := backup.CheckKeys(backup.Keys{Encrypt: []byte(strings.Repeat("e", 32))}); err == nil {
		t.Fatal("an encryption key without a series key was taken")
	}
	// Segment 2's stored copy in segment 1's place.
	two, err := os.ReadFile(filepath.Join(root, wal.Key("p/", names[1])))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, wal.Key("p/", names[0])), two, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(names[0], key); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("a sealed file in another's place: %v", err)
	}
	// One byte of the frame changed.
	two[len(two)/2] ^= 1
	if err := os.WriteFile(filepath.Join(root, wal.Key("p/", names[1])), two, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(names[1], key); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("a changed file: %v", err)
	}

	// Encrypted and sealed: the stored copy shows nothing of the file,
	// and only the encryption key reads it.
	keys := backup.Keys{Seal: key, Encrypt: []byte(strings.Repeat("e", 32))}
	plain := bytes.Repeat([]byte("wal-plaintext-canary "), 4096)
	name := "000000010000000000000004"
	if err := os.WriteFile(filepath.Join(src, name), plain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := wal.Push(ctx, st, "p/", filepath.Join(src, name), keys); err != nil {
		t.Fatal(err)
	}
	if err := wal.Push(ctx, st, "p/", filepath.Join(src, name), keys); err != nil {
		t.Fatalf("pushing an encrypted file again: %v", err)
	}
	stored, err := os.ReadFile(filepath.Join(root, wal.Key("p/", name)))
	if err != nil || bytes.Contains(stored, []byte("canary")) || bytes.Contains(stored, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Fatalf("the stored copy shows the file or its zstd frame (%v)", err)
	}
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	if err := wal.Fetch(ctx, st, "p/", name, dest, keys); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, plain) {
		t.Fatal("the decrypted file differs")
	}
	if err := wal.Fetch(ctx, st, "p/", name, dest, backup.Keys{Seal: key}); !errors.Is(err, backup.ErrEncrypted) {
		t.Fatalf("fetching an encrypted file without its key: %v", err)
	}
}

// A demoted Database's claim on its own archive goes when it is promoted
// again, and only its own: another Database's claim stays. A token is
// consumed once.
func TestDemotedClaimIsReleasedAndATokenConsumedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := backup.NewDir(t.TempDir())
	claim := func(uid string) instanceapi.PromotionClaim {
		return instanceapi.PromotionClaim{Database: "ns/" + uid, DatabaseUID: uid, Time: time.Now()}
	}
	if err := wal.ClaimPromotion(ctx, st, "a/", claim(instanceapi.DemotedClaimUID("uid-a"))); err != nil {
		t.Fatal(err)
	}
	if c, _ := wal.PromotionOf(ctx, st, "a/"); c == nil || !c.Demoted() || claim("uid-a").Demoted() {
		t.Fatalf("a demoted claim does not say so: %+v", c)
	}
	if err := wal.ClaimPromotion(ctx, st, "a/", claim("uid-c")); !errors.Is(err, wal.ErrPromotedElsewhere) {
		t.Fatalf("a replica's claim on a demoted archive: %v, want ErrPromotedElsewhere", err)
	}
	if err := wal.ReleaseDemoted(ctx, st, "a/", "uid-other"); err != nil {
		t.Fatal(err)
	}
	if c, _ := wal.PromotionOf(ctx, st, "a/"); c == nil {
		t.Fatal("another Database's release removed the demoted claim")
	}
	if err := wal.ReleaseDemoted(ctx, st, "a/", "uid-a"); err != nil {
		t.Fatal(err)
	}
	if c, err := wal.PromotionOf(ctx, st, "a/"); c != nil || err != nil {
		t.Fatalf("the demoted claim after its release: %+v, %v", c, err)
	}
	tok := instanceapi.DemotionToken{Database: "ns/a", Timeline: 1, LSN: "0/5000028"}
	if err := wal.ClaimKey(ctx, st, "a/", tok.DemotionKey(), claim("uid-b")); err != nil {
		t.Fatal(err)
	}
	if err := wal.ClaimKey(ctx, st, "a/", tok.DemotionKey(), claim("uid-b")); err != nil {
		t.Fatalf("the same Database consuming its token again: %v", err)
	}
	if err := wal.ClaimKey(ctx, st, "a/", tok.DemotionKey(), claim("uid-c")); !errors.Is(err, wal.ErrPromotedElsewhere) {
		t.Fatalf("a token consumed twice: %v, want ErrPromotedElsewhere", err)
	}
}
