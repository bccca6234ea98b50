package database

import (
	"fmt"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

// maintenanceHold says whether the planned restart of the primary for
// revision waits, and until when: outside spec.maintenance's windows,
// unless the annotation approves that revision. "" lets it go.
func maintenanceHold(db *v1alpha1.Database, revision string, now time.Time) (time.Duration, string) {
	m := db.Spec.Maintenance
	if m == nil || db.Annotations[v1alpha1.AnnotationApprovePrimaryUpdate] == revision {
		return 0, ""
	}
	s, err := schedule.Parse(m.Schedule, m.TimeZone)
	if err != nil {
		return 0, "" // validate refuses it before any rollout
	}
	d := maintenanceDuration(m)
	// A window opened at the last firing before now, if within d.
	if opened := s.Next(now.Add(-d)); !opened.After(now) {
		return 0, ""
	}
	next := s.Next(now)
	return next.Sub(now), fmt.Sprintf("The primary's restart for revision %s waits for the maintenance window at %s, "+
		"or for the annotation %s=%s", revision, next.UTC().Format(time.RFC3339), v1alpha1.AnnotationApprovePrimaryUpdate, revision)
}

func maintenanceDuration(m *v1alpha1.DatabaseMaintenance) time.Duration {
	if m.Duration == nil || m.Duration.Duration <= 0 {
		return time.Hour
	}
	return m.Duration.Duration
}

// maintenanceProblem says what is wrong with spec.maintenance, or "".
func maintenanceProblem(db *v1alpha1.Database) string {
	m := db.Spec.Maintenance
	if m == nil {
		return ""
	}
	if _, err := schedule.Parse(m.Schedule, m.TimeZone); err != nil {
		return "spec.maintenance: " + err.Error()
	}
	return ""
}
