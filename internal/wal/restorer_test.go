package wal_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// The Restorer hands recovery the file it asks for and fetches the next
// segments meanwhile, so the next request finds its file already there;
// past the archive's end it answers ErrNotArchived, and a file archived
// after a fetch ahead missed it is found when recovery asks.
func TestRestorerFetchesAhead(t *testing.T) {
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
		if err := wal.Push(ctx, st, "p/", p); err != nil {
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

func TestNextSegment(t *testing.T) {
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

func TestChooseBase(t *testing.T) {
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
