package instance

import (
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// The holder is covered only once a renewal recorded the demand, and then
// until the earliest of its peers' promises and its own heartbeat; a peer
// that never promised leaves it uncovered.
func TestVouchersCoverUntilTheEarliestPromise(t *testing.T) {
	now := time.Unix(1e9, 0)
	term := instanceapi.PromiseDuration - instanceapi.LeaseFenceMargin
	var v vouchers
	v.beat(now)
	v.promised("db-1", now)
	if v.covers(now) {
		t.Fatal("covered before a renewal recorded the demand")
	}
	v.recordedAs([]string{"db-1", "db-2"})
	if v.covers(now) {
		t.Fatal("covered while db-2 never promised")
	}
	v.promised("db-2", now.Add(time.Second))
	until, ok := v.coveredUntil(now)
	if !ok || !until.Equal(now.Add(term)) {
		t.Fatalf("coveredUntil = %s, %v; want %s (db-1's promise and the heartbeat)", until, ok, now.Add(term))
	}
	if v.covers(now.Add(term)) {
		t.Error("covered at the earliest promise's end")
	}
	// A renewal about to record more demand widens it at once.
	v.attempt([]string{"db-3"})
	if v.covers(now) {
		t.Error("covered while db-3, about to be recorded, never promised")
	}
	// One that deletes the record uncovers the holder.
	v.attempt(nil)
	if v.covers(now) {
		t.Error("covered after a renewal deleted the record")
	}
	v.reset()
	if v.covers(now) || len(v.targets(nil)) != 0 {
		t.Error("reset kept cover or demand")
	}
}
