package instance

import (
	"testing"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A replica that was streaming stays ready for streamLossGrace after it
// stops (a failover's moment, when the next primary must stay in -rw);
// one that never streamed since it started gets no grace.
func TestStreamJustLost(t *testing.T) {
	t.Parallel()
	m := &Manager{}
	observe := func(streaming bool) {
		m.shared.mu.Lock()
		m.noteStreaming(streaming)
		m.shared.mu.Unlock()
	}
	observe(false)
	if m.streamJustLost() {
		t.Fatal("a replica that never streamed is given the grace")
	}
	observe(true)
	observe(false)
	if !m.streamJustLost() {
		t.Fatal("a replica that just stopped streaming is not given the grace")
	}
	observe(false)
	if !m.streamJustLost() {
		t.Fatal("a second observation without streaming ended the grace early")
	}
	m.shared.mu.Lock()
	m.shared.streamLost = m.shared.streamLost.Add(-streamLossGrace)
	m.shared.notStreamingSince = m.shared.streamLost
	m.shared.mu.Unlock()
	if m.streamJustLost() {
		t.Fatalf("the grace outlasted %s", streamLossGrace)
	}
	// Streaming again, then lost again: a new grace.
	observe(true)
	observe(false)
	if !m.streamJustLost() {
		t.Fatal("a second loss is not given the grace")
	}
	// A restart forgets it.
	m.setPhase(instanceapi.PhaseStarting, "")
	observe(false)
	if m.streamJustLost() {
		t.Fatal("the grace survived a restart")
	}
}
