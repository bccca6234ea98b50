package instance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A promise outlives the manager's run (the file), refuses the instance's
// own promotion while it holds, and is closed for good once a promotion
// claims it, so no holder counts on it after.
func TestPromiseHoldsAcrossRunsAndClosesOnClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), instanceapi.PromiseFile)
	now := time.Unix(1e9, 0)
	p := &promise{path: path}
	if err := p.give("db-0", "0/3000000", now); err != nil {
		t.Fatal(err)
	}
	if holder, ok := p.active(now.Add(time.Second)); !ok || holder != "db-0" {
		t.Fatalf("active = %s, %v", holder, ok)
	}
	if err := p.claim("db-1", "", false, now.Add(time.Second)); !errors.Is(err, errPromised) {
		t.Fatalf("claim while promised: %v, want errPromised", err)
	}
	// The holder's own release, or its handover, frees the promise.
	if err := p.claim("db-1", "db-0", false, now.Add(time.Second)); err != nil {
		t.Fatalf("claim after db-0 released: %v", err)
	}
	if err := p.give("db-0", "", now); err == nil {
		t.Fatal("a claimed promise was given again")
	}
	p.reopen()

	// The next run reads it back, with the clock skew added.
	next := &promise{path: path}
	next.load(now)
	if holder, ok := next.active(now.Add(instanceapi.PromiseDuration + instanceapi.MaxClockSkew/2)); !ok || holder != "db-0" {
		t.Errorf("the next run's promise: %s, %v; want db-0 held through the skew", holder, ok)
	}
	if _, ok := next.active(now.Add(instanceapi.PromiseDuration + instanceapi.MaxClockSkew + time.Millisecond)); ok {
		t.Error("the next run's promise outlived its time and the skew")
	}

	// An unreadable record counts as a promise made now.
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := &promise{path: path}
	bad.load(now)
	if _, ok := bad.active(now.Add(time.Second)); !ok {
		t.Error("an unreadable promise record was not kept as a promise")
	}
}
