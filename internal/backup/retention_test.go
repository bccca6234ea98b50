package backup

import (
	"strings"
	"testing"
	"time"
)

func TestSelectGrandfatherFatherSon(t *testing.T) {
	t.Parallel()
	// One backup every 12 hours for 70 days, newest first.
	var all []Manifest
	end := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	for i := range 140 {
		at := end.Add(-time.Duration(i) * 12 * time.Hour)
		all = append(all, Manifest{ID: NewID(at), End: at})
	}
	ids := func(ms []Manifest) string {
		var s []string
		for _, m := range ms {
			s = append(s, m.ID)
		}
		return strings.Join(s, ",")
	}
	tests := []struct {
		name string
		r    Retention
		want string
	}{
		{"nothing asked keeps the newest", Retention{}, "20260331T120000Z"},
		{"last 3", Retention{KeepLast: 3}, "20260331T120000Z,20260331T000000Z,20260330T120000Z"},
		{"2 daily", Retention{KeepDaily: 2}, "20260331T120000Z,20260330T120000Z"},
		{"2 weekly", Retention{KeepWeekly: 2}, "20260331T120000Z,20260329T120000Z"},
		{"3 monthly", Retention{KeepMonthly: 3}, "20260331T120000Z,20260228T120000Z,20260131T120000Z"},
		{"combined without duplicates", Retention{KeepLast: 2, KeepDaily: 2}, "20260331T120000Z,20260331T000000Z,20260330T120000Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep, prune := Select(all, tt.r)
			if got := ids(keep); got != tt.want {
				t.Errorf("kept %s, want %s", got, tt.want)
			}
			if len(keep)+len(prune) != len(all) {
				t.Errorf("kept %d + pruned %d != %d", len(keep), len(prune), len(all))
			}
		})
	}
}

func TestElapsed(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		start, end time.Time
		want       float64
	}{
		{start, start.Add(1500 * time.Millisecond), 1.5},
		{start, time.Time{}, 0}, // failed before it ended
		{time.Time{}, start, 0}, // failed before it started
		{start, start.Add(-time.Second), 0},
	} {
		if got := Elapsed(c.start, c.end); got != c.want {
			t.Errorf("Elapsed(%v, %v) = %v, want %v", c.start, c.end, got, c.want)
		}
	}
}
