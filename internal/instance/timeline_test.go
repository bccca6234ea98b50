package instance

import (
	"testing"
)

func TestReplayedPastFork(t *testing.T) {
	t.Parallel()
	const history = "1\t0/3000000\tno recovery target specified\n\n2\t0/5030E70\tno recovery target specified\n"
	for _, tc := range []struct {
		name     string
		tli      int
		replayed uint64
		want     bool
	}{
		{"before the fork off timeline 1", 1, 0x2FFFFFF, false},
		{"at the fork off timeline 1", 1, 0x3000000, false},
		{"past the fork off timeline 1", 1, 0x3000001, true},
		{"timeline 2, behind its fork", 2, 0x5030E70, false},
		{"timeline 2, 136 bytes past its fork", 2, 0x5030EF8, true},
		{"a timeline the primary never passed through", 5, 0x1000000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := replayedPastFork(history, tc.tli, tc.replayed); got != tc.want {
				t.Errorf("replayedPastFork(timeline %d, %X) = %v, want %v", tc.tli, tc.replayed, got, tc.want)
			}
		})
	}
}

// The probe streams from the timeline that holds the position: a position
// before a switch point is on the parent timeline, whose segment file
// names differ.
func TestTimelineAt(t *testing.T) {
	t.Parallel()
	const history = "1\t0/3000000\tno recovery target specified\n\n2\t0/5030E70\tno recovery target specified\n"
	for _, tc := range []struct {
		lsn  uint64
		want int
	}{{0x2000000, 1}, {0x3000000, 2}, {0x5000000, 2}, {0x5030E70, 3}, {0x6000000, 3}} {
		if got := timelineAt(history, 3, tc.lsn); got != tc.want {
			t.Errorf("timelineAt(%X) = %d, want %d", tc.lsn, got, tc.want)
		}
	}
	if got := timelineAt("", 1, 0x9000000); got != 1 {
		t.Errorf("timelineAt on timeline 1 = %d", got)
	}
}
