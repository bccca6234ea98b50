package instance

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The identity written is the identity read; a directory without one says
// so without an error, and a damaged one is an error.
func TestIdentityRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := readIdentity(dir); ok || err != nil {
		t.Fatalf("empty directory: %v, %v", ok, err)
	}
	want := Identity{DatabaseUID: "uid-2", Bootstrap: "initdb", Created: time.Unix(1e9, 0).UTC(), PreviousUIDs: []string{"uid-1"}}
	if err := writeIdentity(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := readIdentity(dir)
	if err != nil || !ok || got.DatabaseUID != want.DatabaseUID || got.Bootstrap != want.Bootstrap ||
		!got.Created.Equal(want.Created) || len(got.PreviousUIDs) != 1 || got.PreviousUIDs[0] != "uid-1" {
		t.Fatalf("read back %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, identityFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readIdentity(dir); err == nil {
		t.Error("a damaged identity file read without an error")
	}
}
