package schedule

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a cron expression in the IANA time zone tz ("" means UTC).
func Parse(expr, tz string) (cron.Schedule, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("unknown time zone %q", tz)
		}
		loc = l
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid cron expression %q: %w", expr, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	return s, nil
}

// MissedPolicy says what happens to runs whose time passed while nothing ran.
type MissedPolicy int

const (
	// RunOnce runs the most recent missed time once, never the others.
	RunOnce MissedPolicy = iota
	// Skip runs nothing that is late; the next run is the next scheduled time.
	Skip
)

// onTime is how late a run may start and still count as on time when no
// starting deadline is set.
const onTime = time.Minute

// maxSteps bounds the walk over missed times (one a minute for ~70 days).
const maxSteps = 100000

// Decision is what to do at now.
type Decision struct {
	// Due is the scheduled time to run now; zero means none.
	Due time.Time
	// Skipped is the latest missed time that will not run; zero means none.
	Skipped time.Time
	// Missed counts scheduled times since last that passed without a run
	// (including Due or Skipped).
	Missed int
	// Next is the first scheduled time after now.
	Next time.Time
}

// walk returns the last scheduled time in (from, to], how many there are
// (counting at most maxSteps) and the first time after to.
func walk(s cron.Schedule, from, to time.Time) (time.Time, int, time.Time) {
	latest, n := time.Time{}, 0
	t := s.Next(from)
	for ; !t.IsZero() && !t.After(to) && n < maxSteps; t = s.Next(t) {
		latest, n = t, n+1
	}
	return latest, n, t
}

// Decide finds what is due at now for a schedule last run (or created) at
// last. However long the downtime, at most one run is due: the most recent
// missed time, and only when policy and the starting deadline (0 = none)
// allow it.
func Decide(s cron.Schedule, last, now time.Time, policy MissedPolicy, startingDeadline time.Duration) Decision {
	d := Decision{}
	latest, n, next := walk(s, last, now)
	d.Missed = n
	if n == maxSteps {
		// Too far behind to walk it all: only the most recent time matters,
		// so walk the last week again to find it.
		if latest, n, next = walk(s, now.Add(-7*24*time.Hour), now); n == maxSteps {
			latest, next = now, s.Next(now)
		}
	}
	// The next time follows the schedule's own sequence (for @every, from
	// the last run, not from now).
	d.Next = next
	if latest.IsZero() {
		return d
	}
	late := now.Sub(latest)
	switch {
	case startingDeadline > 0 && late > startingDeadline:
		d.Skipped = latest
	case policy == Skip && startingDeadline == 0 && late > onTime:
		d.Skipped = latest
	default:
		d.Due = latest
	}
	return d
}
