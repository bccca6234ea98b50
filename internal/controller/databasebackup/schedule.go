package databasebackup

import (
	"fmt"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

// validateSchedule parses spec.schedule and spec.verify.schedule with the
// parser the scheduler uses, naming the field in the error: the schema
// checks the shape, only a parse catches "minute 61".
func validateSchedule(b *v1alpha1.DatabaseBackup) error {
	tz := ptrDeref(b.Spec.TimeZone)
	if b.Spec.Schedule != "" {
		if _, err := schedule.Parse(b.Spec.Schedule, tz); err != nil {
			return fmt.Errorf("spec.schedule: %w", err)
		}
	}
	if v := b.Spec.Verify; v != nil && v.Schedule != "" {
		if _, err := schedule.Parse(v.Schedule, tz); err != nil {
			return fmt.Errorf("spec.verify.schedule: %w", err)
		}
	}
	return nil
}
