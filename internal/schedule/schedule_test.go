package schedule

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	from := time.Date(2026, 11, 21, 10, 7, 0, 0, time.UTC)
	tests := []struct {
		expr, tz string
		wantErr  bool
		next     time.Time
	}{
		{expr: "*/10 * * * *", next: time.Date(2026, 11, 21, 10, 10, 0, 0, time.UTC)},
		{expr: "@daily", next: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)},
		{expr: "@every 6h", next: from.Add(6 * time.Hour)},
		{expr: "0 3 * * *", tz: "Europe/Berlin", next: time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)},
		{expr: "0 3 * * MON", next: time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)},
		{expr: "61 * * * *", wantErr: true},
		{expr: "* * * *", wantErr: true},
		{expr: "0 3 * * *", tz: "Mars/Olympus", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.expr+"/"+tt.tz, func(t *testing.T) {
			s, err := Parse(tt.expr, tt.tz)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Parse(%q, %q) succeeded, want an error", tt.expr, tt.tz)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q, %q): %v", tt.expr, tt.tz, err)
			}
			if got := s.Next(from); !got.Equal(tt.next) {
				t.Errorf("Next = %v, want %v", got.UTC(), tt.next)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	every10, _ := Parse("*/10 * * * *", "")
	base := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		now      time.Time
		policy   MissedPolicy
		deadline time.Duration
		due      time.Time
		skipped  time.Time
		missed   int
		next     time.Time
	}{
		{"nothing due yet", base.Add(5 * time.Minute), RunOnce, 0, time.Time{}, time.Time{}, 0, base.Add(10 * time.Minute)},
		{"on time", base.Add(10*time.Minute + 2*time.Second), RunOnce, 0, base.Add(10 * time.Minute), time.Time{}, 1, base.Add(20 * time.Minute)},
		{"ten periods down: exactly one catch-up, the latest", base.Add(100*time.Minute + 30*time.Second), RunOnce, 0,
			base.Add(100 * time.Minute), time.Time{}, 10, base.Add(110 * time.Minute)},
		{"ten periods down, Skip", base.Add(100*time.Minute + 2*time.Minute), Skip, 0, time.Time{}, base.Add(100 * time.Minute), 10, base.Add(110 * time.Minute)},
		{"Skip still runs what is on time", base.Add(100*time.Minute + 5*time.Second), Skip, 0, base.Add(100 * time.Minute), time.Time{}, 10, base.Add(110 * time.Minute)},
		{"past the starting deadline", base.Add(100*time.Minute + 5*time.Minute), RunOnce, time.Minute, time.Time{}, base.Add(100 * time.Minute), 10, base.Add(110 * time.Minute)},
		{"within the starting deadline", base.Add(100*time.Minute + 5*time.Minute), RunOnce, 10 * time.Minute, base.Add(100 * time.Minute), time.Time{}, 10, base.Add(110 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(every10, base, tt.now, tt.policy, tt.deadline)
			if !d.Due.Equal(tt.due) || !d.Skipped.Equal(tt.skipped) || d.Missed != tt.missed || !d.Next.Equal(tt.next) {
				t.Errorf("Decide = %+v, want due %s skipped %s missed %d next %s", d, tt.due, tt.skipped, tt.missed, tt.next)
			}
		})
	}
	// A year of downtime on a one-minute schedule is still one run.
	everyMinute, _ := Parse("* * * * *", "")
	d := Decide(everyMinute, base, base.Add(365*24*time.Hour), RunOnce, 0)
	if want := base.Add(365 * 24 * time.Hour); !d.Due.Equal(want) {
		t.Errorf("after a year: %+v", d)
	}
}

func TestDecideEveryFollowsTheLastRun(t *testing.T) {
	every, _ := Parse("@every 20s", "")
	base := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	d := Decide(every, base, base.Add(35*time.Second), RunOnce, 0)
	if !d.Due.Equal(base.Add(20*time.Second)) || !d.Next.Equal(base.Add(40*time.Second)) {
		t.Errorf("Decide = %+v, want due +20s and next +40s", d)
	}
}
