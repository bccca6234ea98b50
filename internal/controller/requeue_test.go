package controller_test

import (
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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

// A failed reconcile leaves the generation the status described; a
// success or a terminal error (the status says why) moves it on.
func TestObservedGenerationOnlyOnSuccess(t *testing.T) {
	if got := controller.ObservedGeneration(3, 4, nil); got != 4 {
		t.Errorf("success: %d", got)
	}
	if got := controller.ObservedGeneration(3, 4, errors.New("conflict")); got != 3 {
		t.Errorf("error: %d", got)
	}
	if got := controller.ObservedGeneration(3, 4, reconcile.TerminalError(errors.New("invalid"))); got != 4 {
		t.Errorf("terminal error: %d", got)
	}
}
