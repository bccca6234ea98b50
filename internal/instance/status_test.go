package instance

import (
	"testing"

	"github.com/go-logr/logr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// What the manager records is what GET /status reports, the role included.
func TestStatusReportsPhaseMessageAndRole(t *testing.T) {
	m := New(&Config{Pod: "db-0", PGData: t.TempDir()}, logr.Discard(), nil)
	m.setRole(instanceapi.RoleReplica)
	m.setPhase(instanceapi.PhaseRunning, "streaming")
	s := m.Status()
	if s.Phase != instanceapi.PhaseRunning || s.Message != "streaming" || s.Role != instanceapi.RoleReplica || m.role() != instanceapi.RoleReplica {
		t.Fatalf("status %+v", s)
	}
	m.setMessage("caught up")
	if got := m.Status().Message; got != "caught up" {
		t.Errorf("message %q after setMessage", got)
	}
}
