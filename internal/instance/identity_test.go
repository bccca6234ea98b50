package instance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
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

// A data directory without an identity record was made by no daytwo
// bootstrap: a primary refuses it unless the user asks to re-use it (then
// it is stamped), a replica clones the primary again.
func TestDataWithoutAnIdentityIsNotAdopted(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   Config
		check func(error) bool
	}{
		{"a primary", Config{Role: "primary"}, func(err error) bool { var dc dataConflict; return errors.As(err, &dc) }},
		{"a replica", Config{Role: "replica"}, func(err error) bool { return errors.Is(err, errReclone) }},
		{"re-use asked", Config{Role: "primary", ReuseData: true}, func(err error) bool { return err == nil }},
	} {
		dir := t.TempDir()
		c.cfg.PGData, c.cfg.DatabaseUID, c.cfg.BootstrapSource = dir, "uid-1", "initdb"
		m := New(&c.cfg, logr.Discard(), nil)
		if err := m.checkIdentity(); !c.check(err) {
			t.Errorf("%s: checkIdentity() = %v", c.name, err)
		}
		id, found, _ := readIdentity(dir)
		if stamped := found && id.DatabaseUID == "uid-1"; stamped != c.cfg.ReuseData {
			t.Errorf("%s: stamped %v, want %v", c.name, stamped, c.cfg.ReuseData)
		}
	}
}
