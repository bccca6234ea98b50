package backup_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// With a series key, what a bucket writer changes is refused before it
// runs. The attack: a COMMENT in the stored dump rewritten (same length,
// so the archive stays valid) into a statement that runs a program on the
// server. pg_restore runs an archive's statements as it reads them, and a
// rollback does not take a program's effect back: before, the checksum
// mismatch was found at the end, after the program had run (the marker
// file existed). Now the whole part is checked first. A manifest changed,
// signed with another key, or stripped of its MAC is refused or ignored.
func TestBucketWriterCannotChangeWhatARestoreRuns(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t)
	st := s3(t, testpg.StartMinIO(t), "backups")
	pad := strings.Repeat("x", 200)
	pg.Exec(t, "postgres", "CREATE DATABASE small")
	pg.Exec(t, "small", "CREATE TABLE t AS SELECT g FROM generate_series(1, 100000) g")
	pg.Exec(t, "small", "COMMENT ON TABLE t IS '"+pad+"'")
	keyed := func(db, key string) backup.Options {
		o := opts(pg, db, st)
		o.Series.Key = []byte(key)
		o.Compression = backup.Compression{Algorithm: "none"}
		return o
	}
	key := strings.Repeat("k", 32)
	m, err := backup.Run(ctx, keyed("small", key), "20260101T000000Z", "test")
	if err != nil || m.MAC == "" {
		t.Fatalf("backup: MAC %q, %v", m.MAC, err)
	}

	// The program's mark, somewhere the server may write.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	evil := "x'; COPY (SELECT 1) TO PROGRAM 'touch " + marker + "'; COMMENT ON TABLE t IS 'x"
	if len(evil) > len(pad) {
		t.Fatalf("the payload is longer than the comment it replaces")
	}
	evil += strings.Repeat("x", len(pad)-len(evil))
	rc, err := st.Get(ctx, m.DataKey)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	if bytes.Count(data, []byte(pad)) != 1 {
		t.Fatalf("the dump holds the comment %d times", bytes.Count(data, []byte(pad)))
	}
	if err := st.Put(ctx, m.DataKey, bytes.NewReader(bytes.Replace(data, []byte(pad), []byte(evil), 1))); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, "postgres", "CREATE DATABASE target")
	_, err = backup.Restore(ctx, keyed("target", key), m.ID, "")
	if !errors.Is(err, backup.ErrChecksum) {
		t.Fatalf("restore of a changed dump: %v, want a checksum error", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatal("the changed dump ran a program on the server before it was refused")
	}
	t.Logf("refused before pg_restore: %v", err)

	// The manifest made to name the changed dump: its MAC no longer verifies.
	mkey := "ns/orders/" + m.ID + "." + nightly.UID + ".manifest.json"
	forged := readJSON(t, st, mkey)
	forged["sha256"] = strings.Repeat("0", 64)
	writeJSON(t, st, mkey, forged)
	if _, err := backup.Restore(ctx, keyed("target", key), m.ID, ""); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("restore from a changed manifest: %v, want an authentication error", err)
	}
	// Signed with another key.
	if _, err := backup.Restore(ctx, keyed("target", strings.Repeat("o", 32)), m.ID, ""); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("restore with another key: %v, want an authentication error", err)
	}
	// Without its MAC, a manifest is not the series'.
	delete(forged, "mac")
	writeJSON(t, st, mkey, forged)
	if _, err := backup.Restore(ctx, keyed("target", key), m.ID, ""); !errors.Is(err, backup.ErrNoBackup) {
		t.Fatalf("restore from a manifest without a MAC: %v, want no backup", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a program ran on the server")
	}
	if err := backup.CheckKeys(backup.Keys{Seal: []byte("short")}); err == nil {
		t.Fatal("a 5-byte series key was taken")
	}

	// A backup taken before the series had a key is not restorable with
	// it, and not deleted by its retention either.
	before := opts(pg, "small", st)
	before.Prefix = "ns/transition/"
	old, err := backup.Run(ctx, before, "20260101T000000Z", "test")
	if err != nil {
		t.Fatal(err)
	}
	after := keyed("small", key)
	after.Prefix = before.Prefix
	if _, err := backup.Run(ctx, after, "20260102T000000Z", "test"); err != nil {
		t.Fatal(err)
	}
	kept, pruned, err := backup.Prune(ctx, st, after.Prefix, after.Series, backup.Retention{KeepLast: 1})
	if err != nil || len(kept) != 1 || kept[0].ID != "20260102T000000Z" || pruned != 0 {
		t.Fatalf("prune with the key: kept %v, pruned %d, %v", kept, pruned, err)
	}
	if _, err := st.Size(ctx, old.DataKey); err != nil {
		t.Fatalf("the keyless backup's data went with a prune: %v", err)
	}

	// A good manifest copied to the next run's key stands for nothing:
	// the run takes its own backup, and retention deletes nothing real.
	// A junk manifest claiming the series blocks no restore.
	good := "ns/transition/20260102T000000Z." + nightly.UID + ".manifest.json"
	replay := readJSON(t, st, good)
	writeJSON(t, st, "ns/transition/20260103T000000Z."+nightly.UID+".manifest.json", replay)
	writeJSON(t, st, "ns/transition/junk."+nightly.UID+".manifest.json", map[string]any{"series": nightly.UID, "mac": "00"})
	if _, err := backup.Run(ctx, after, "20260103T000000Z", "test"); !errors.Is(err, backup.ErrUnauthenticated) {
		t.Fatalf("a run whose key holds a replayed manifest: %v, want it refused", err)
	}
	if _, err := backup.Run(ctx, after, "20260104T000000Z", "test"); err != nil {
		t.Fatal(err)
	}
	kept, _, err = backup.Prune(ctx, st, after.Prefix, after.Series, backup.Retention{KeepLast: 2})
	if err != nil || len(kept) != 2 || kept[0].ID != "20260104T000000Z" || kept[1].ID != "20260102T000000Z" {
		t.Fatalf("prune beside a replayed and a junk manifest: kept %v, %v", kept, err)
	}
	if m, err := backup.Find(ctx, st, after.Prefix, after.Series, "20260102T000000Z"); err != nil || m.DataKey == "" {
		t.Fatalf("a junk manifest blocked finding a good backup: %v", err)
	}
	// A restore whose key was required and not given trusts nothing.
	missing := after
	missing.Series.Key, missing.Series.KeyMissing = nil, true
	if _, err := backup.Find(ctx, st, missing.Prefix, missing.Series, ""); !errors.Is(err, backup.ErrNoSeriesKey) {
		t.Fatalf("a restore without its required key: %v", err)
	}
}

func readJSON(t *testing.T, st backup.Storage, key string) map[string]any {
	t.Helper()
	rc, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	out := map[string]any{}
	if err := json.NewDecoder(rc).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeJSON(t *testing.T, st backup.Storage, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, key, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}
