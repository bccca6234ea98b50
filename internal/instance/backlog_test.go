package instance

import (
	"testing"
	"time"
)

func TestTimeToFull(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	s := func(sec int, bytes int64) backlogSample {
		return backlogSample{at: at.Add(time.Duration(sec) * time.Second), bytes: bytes}
	}
	for _, c := range []struct {
		name    string
		samples []backlogSample
		free    int64
		want    int64
	}{
		{"one sample says nothing", []backlogSample{s(0, 1<<20)}, 1 << 30, 0},
		{"a backlog that does not grow", []backlogSample{s(0, 64<<20), s(60, 64<<20)}, 1 << 30, 0},
		{"a shrinking backlog", []backlogSample{s(0, 64<<20), s(60, 16<<20)}, 1 << 30, 0},
		{"16 MiB a minute into 1 GiB", []backlogSample{s(0, 0), s(30, 1<<20), s(60, 16<<20)}, 1 << 30, 3840},
		{"no free space known", []backlogSample{s(0, 0), s(60, 16<<20)}, 0, 0},
	} {
		if got := timeToFull(c.samples, c.free); got != c.want {
			t.Errorf("%s: %d s, want %d", c.name, got, c.want)
		}
	}
}
