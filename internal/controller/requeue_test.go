package controller_test

import (
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/controller"
)

func TestSoonestIgnoresNone(t *testing.T) {
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{0, 0}, 0},
		{[]time.Duration{0, 3 * time.Second, time.Second}, time.Second},
		{[]time.Duration{30 * time.Second, 0}, 30 * time.Second},
	} {
		if got := controller.Soonest(c.in...); got != c.want {
			t.Errorf("Soonest(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}
