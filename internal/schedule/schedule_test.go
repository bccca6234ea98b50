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
