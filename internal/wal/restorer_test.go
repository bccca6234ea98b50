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

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// The Restorer hands recovery the file it asks for and fetches the next
// segments meanwhile, so the next request finds its file already there;
// past the archive's end it answers ErrNotArchived, and a file archived
// after a fetch ahead missed it is found when recovery asks.
func TestRestorerFetchesAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := backup.NewDir(t.TempDir())
	src := t.TempDir()
	names := []string{"0000000100000000000000FE", "0000000100000000000000FF", "000000010000000100000000", "000000010000000100000001"}
	content := map[string][]byte{}
	archive := func(name string) {
		content[name] = bytes.Repeat([]byte(name), 1000)
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, content[name], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := wal.Push(ctx, st, "p/", p, backup.Keys{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names[:3] {
		archive(n)
	}
	r := &wal.Restorer{Storage: st, Prefix: "p/", Dir: filepath.Join(t.TempDir(), "prefetch"), Ahead: 2}
	pgWAL := t.TempDir()
	restore := func(name string) error {
		dest := filepath.Join(pgWAL, "RECOVERYXLOG")
		if err := r.Restore(ctx, name, dest); err != nil {
			return err
		}
		if got, _ := os.ReadFile(dest); !bytes.Equal(got, content[name]) {
			t.Fatalf("%s restored with the wrong content", name)
		}
		return nil
	}
	if err := restore(names[0]); err != nil {
		t.Fatal(err)
	}
	// The next two were fetched ahead, across the log boundary.
	for _, n := range names[1:3] {
		deadline := time.Now().Add(5 * time.Second)
		for _, err := os.Stat(filepath.Join(r.Dir, n)); err != nil; _, err = os.Stat(filepath.Join(r.Dir, n)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not fetched ahead", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, n := range names[1:3] {
		if err := restore(n); err != nil {
			t.Fatal(err)
		}
	}
	if s := r.Stats(); s.Restored != 3 || s.Prefetched != 2 || s.Last != names[2] {
		t.Fatalf("stats = %+v, want 3 restored, 2 of them fetched ahead, %s last", s, names[2])
	}
	// names[3] was looked for ahead and missing; archived now, it is found.
	archive(names[3])
	if err := restore(names[3]); err != nil {
		t.Fatalf("a segment archived after a fetch ahead missed it: %v", err)
	}
	if err := r.Restore(ctx, "000000010000000100000002", filepath.Join(pgWAL, "x")); !errors.Is(err, wal.ErrNotArchived) {
		t.Fatalf("past the archive's end: %v, want ErrNotArchived", err)
	}
	if err := r.Restore(ctx, "00000002.history", filepath.Join(pgWAL, "x")); !errors.Is(err, wal.ErrNotArchived) {
		t.Fatalf("a history file not archived: %v, want ErrNotArchived", err)
	}
}

// A demoted primary's last segment is archived as <segment>.demoted: a
// Restorer with Demoted hands it over in the segment's place, and one
// without does not, nor PostgreSQL's own <segment>.partial; a complete
// segment archived later wins.
func TestRestorerFallsBackToADemotedSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := backup.NewDir(t.TempDir())
	src := t.TempDir()
	const seg = "000000010000000000000005"
	push := func(name string, content []byte) {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := wal.Push(ctx, st, "p/", p, backup.Keys{}); err != nil {
			t.Fatal(err)
		}
	}
	partial := bytes.Repeat([]byte("partial"), 100)
	push(seg+".demoted", partial)
	push("000000010000000000000006.partial", partial)
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	without := &wal.Restorer{Storage: st, Prefix: "p/", Dir: filepath.Join(t.TempDir(), "a")}
	if err := without.Restore(ctx, seg, dest); !errors.Is(err, wal.ErrNotArchived) {
		t.Fatalf("without Demoted: %v, want ErrNotArchived", err)
	}
	with := &wal.Restorer{Storage: st, Prefix: "p/", Dir: filepath.Join(t.TempDir(), "b"), Demoted: true}
	if err := with.Restore(ctx, "000000010000000000000006", dest); !errors.Is(err, wal.ErrNotArchived) {
		t.Fatalf("PostgreSQL's own partial segment: %v, want ErrNotArchived", err)
	}
	if err := with.Restore(ctx, seg, dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, partial) {
		t.Fatal("the partial segment restored with the wrong content")
	}
	whole := bytes.Repeat([]byte("whole"), 100)
	push(seg, whole)
	if err := with.Restore(ctx, seg, dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, whole) {
		t.Fatal("the partial segment restored though the whole one is archived")
	}
}

func TestNextSegment(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		size int64
		want string
	}{
		{"000000010000000000000001", 0, "000000010000000000000002"},
		{"0000000100000000000000FF", 16 << 20, "000000010000000100000000"},
		{"00000003000000020000003F", 64 << 20, "000000030000000300000000"},
		{"000000010000000000000002", 1 << 30, "000000010000000000000003"},
		{"000000010000000000000003", 1 << 30, "000000010000000100000000"},
	} {
		if got := wal.NextSegment(c.name, c.size); got != c.want {
			t.Errorf("NextSegment(%s, %d) = %s, want %s", c.name, c.size, got, c.want)
		}
	}
}

func TestSegmentName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tli  int
		lsn  uint64
		size int64
		want string
	}{
		{1, 0x3000028, 0, "000000010000000000000003"},
		{2, 0x1FF000000, 16 << 20, "0000000200000001000000FF"},
		{0x1A, 0x300000000 + 64<<20, 64 << 20, "0000001A0000000300000001"},
		{1, 1<<30 + 5, 1 << 30, "000000010000000000000001"},
	} {
		if got := wal.SegmentName(c.tli, c.lsn, c.size); got != c.want {
			t.Errorf("SegmentName(%d, %X, %d) = %s, want %s", c.tli, c.lsn, c.size, got, c.want)
		}
		// The segment after it starts where it ends.
		next := (c.lsn/uint64(max(c.size, 16<<20)) + 1) * uint64(max(c.size, 16<<20))
		if got, want := wal.SegmentName(c.tli, next, c.size), wal.NextSegment(c.want, c.size); got != want {
			t.Errorf("SegmentName of the next segment = %s, want NextSegment's %s", got, want)
		}
	}
}

func TestChooseBase(t *testing.T) {
	t.Parallel()
	at := func(m int) time.Time { return time.Date(2026, 11, 24, 7, m, 0, 0, time.UTC) }
	bases := []wal.BaseBackup{
		{ID: "a", EndLSN: "0/3000100", Finished: at(0)},
		{ID: "b", EndLSN: "0/9000100", Finished: at(10)},
		{ID: "c", EndLSN: "1/100", Finished: at(20)},
	}
	for _, c := range []struct {
		time time.Time
		lsn  string
		want string
	}{
		{want: "c"},
		{time: at(15), want: "b"},
		{time: at(10), want: "a"}, // finished at the target: not before it
		{lsn: "0/9000100", want: "b"},
		{lsn: "0/9000000", want: "a"},
		{time: at(0), want: ""},
		{lsn: "0/100", want: ""},
	} {
		got, ok := wal.ChooseBase(bases, c.time, c.lsn)
		if got.ID != c.want || ok != (c.want != "") {
			t.Errorf("ChooseBase(%v, %q) = %q, %v; want %q", c.time, c.lsn, got.ID, ok, c.want)
		}
	}
}

// Retention deletes the dropped base backups only (another series' stay)
// and the WAL before the oldest base backup left, keeping every file a
// remaining one needs (segments from its first on, of every timeline, and
// all history files), and the first segment of the newest timeline, where
// a demoted Database continues onto it.
func TestPruneArchiveKeepsWhatKeptBasesNeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	st := backup.NewDir(root)
	put := func(key, content string) {
		if err := st.Put(ctx, key, bytes.NewReader([]byte(content))); err != nil {
			t.Fatal(err)
		}
	}
	base := func(id, startWAL string, finished time.Time) {
		b := wal.BaseBackup{ID: id, Timeline: 1, StartWAL: startWAL, StartLSN: "0/0", EndLSN: "0/1", Finished: finished}
		data, _ := json.Marshal(b)
		put("p/base/"+id+"/base.tar.zst", "tar")
		put("p/base/"+id+"/backup.json", string(data))
	}
	now := time.Now()
	base("old", "000000010000000000000002", now.Add(-2*time.Hour))
	base("new", "000000010000000000000005", now.Add(-time.Hour))
	for _, name := range []string{"000000010000000000000002", "000000010000000000000003", "000000010000000000000003.00000028.backup",
		"000000010000000000000004", "000000010000000000000005", "000000010000000000000006", "00000002.history", "000000020000000000000004",
		"000000020000000000000006"} {
		put(wal.Key("p/", name), name)
	}
	base("other-series", "000000010000000000000006", now.Add(-30*time.Minute))
	bases, segments, err := wal.PruneArchive(ctx, st, "p/", []string{"old"})
	if err != nil || bases != 1 || segments != 4 {
		t.Fatalf("pruned %d bases, %d WAL files, %v; want 1 and 4", bases, segments, err)
	}
	left, _ := wal.ListBases(ctx, st, "p/", backup.Keys{})
	if len(left) != 2 || left[0].ID != "new" || left[1].ID != "other-series" {
		t.Fatalf("bases left: %+v", left)
	}
	for _, name := range []string{"000000010000000000000005", "000000010000000000000006", "00000002.history", "000000020000000000000004", "000000020000000000000006"} {
		if _, err := st.Size(ctx, wal.Key("p/", name)); err != nil {
			t.Errorf("%s was pruned: %v", name, err)
		}
	}
	if _, err := st.Size(ctx, "p/base/old/base.tar.zst"); err == nil {
		t.Error("the dropped base backup's data is still stored")
	}
	// Nothing dropped: no WAL a remaining base backup needs goes.
	if b, s, err := wal.PruneArchive(ctx, st, "p/", nil); b != 0 || s != 0 || err != nil {
		t.Fatalf("with nothing dropped: pruned %d, %d, %v", b, s, err)
	}
}

// A base backup knows where it ends from its own manifest, whatever the
// server archives (here: nothing, as on a standby that writes no backup
// history file); and one whose WAL the archive does not hold is refused,
// naming the missing segment, and leaves nothing behind: it would never
// restore. (Base backups that restore: internal/instance's PITR tests.)
func TestBaseBackupEndsWhereItsManifestSays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testpg.Start(t, "archive_mode=on", "archive_command=/bin/true", "wal_level=replica")
	pg.Exec(t, "postgres", "CREATE TABLE t AS SELECT generate_series(1, 1000) g")
	st := backup.NewDir(t.TempDir())
	src := wal.Source{Host: "127.0.0.1", Port: pg.Port, User: "postgres", Password: pg.Password, BinDir: pg.BinDir}
	b, err := wal.TakeBase(ctx, src, st, "p/", "b1", backup.Keys{})
	if err == nil || !strings.Contains(err.Error(), "needs WAL segment "+b.StartWAL) {
		t.Fatalf("a base backup whose WAL was never archived: %v, want a refusal naming segment %s", err, b.StartWAL)
	}
	start, ok1 := postgres.ParseLSN(b.StartLSN)
	end, ok2 := postgres.ParseLSN(b.EndLSN)
	if !ok1 || !ok2 || end <= start || b.StartWAL == "" {
		t.Fatalf("base backup %+v: want an end after its start", b)
	}
	if keys, _ := st.List(ctx, "p/"); len(keys) != 0 {
		t.Fatalf("the refused base backup left %v", keys)
	}
}

// A physical series can be restored from the end of its oldest base backup
// to when its newest WAL segment was stored; a segment older than the
// newest base backup moves nothing, and with no base backup there is no
// window at all.
func TestRecoverabilityWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	st := backup.NewDir(root)
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	kept := []backup.Manifest{{ID: "b2", Method: backup.MethodPhysical, End: t0.Add(24 * time.Hour)}, {ID: "b1", Method: backup.MethodPhysical, End: t0}}
	if w, err := wal.Recoverability(ctx, st, "p/", nil); w != nil || err != nil {
		t.Fatalf("no base backup: %+v, %v", w, err)
	}
	if w, err := wal.Recoverability(ctx, st, "p/", kept); err != nil || !w.First.Equal(t0) || !w.Last.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("no WAL: %+v, %v", w, err)
	}
	src := t.TempDir()
	for i, name := range []string{"000000010000000000000009", "00000002000000000000000A", "00000001000000000000000B"} {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := wal.Push(ctx, st, "p/", p, backup.Keys{}); err != nil {
			t.Fatal(err)
		}
		// Stored long ago, except the newest (timeline 2's), stored last.
		stored := t0.Add(-time.Hour)
		if name == "00000002000000000000000A" {
			stored = t0.Add(25 * time.Hour)
		}
		if err := os.Chtimes(filepath.Join(root, filepath.FromSlash(wal.Key("p/", name))), stored, stored); err != nil {
			t.Fatal(err)
		}
	}
	w, err := wal.Recoverability(ctx, st, "p/", kept)
	if err != nil || !w.First.Equal(t0) || !w.Last.Equal(t0.Add(25*time.Hour)) {
		t.Fatalf("window %+v, %v; want %s to %s", w, err, t0, t0.Add(25*time.Hour))
	}
	// A newest segment stored before the newest base backup ended.
	newest := filepath.Join(root, filepath.FromSlash(wal.Key("p/", "00000002000000000000000A")))
	if err := os.Chtimes(newest, t0.Add(time.Hour), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if w, err := wal.Recoverability(ctx, st, "p/", kept); err != nil || !w.Last.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("an old newest segment moved the window: %+v, %v", w, err)
	}
}
