package database

import (
	"testing"
	"time"
)

func TestSilentFor(t *testing.T) {
	var s inPlaceState
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	if got := s.silentFor("a", false, t0); got != 0 {
		t.Errorf("first silence: %s, want 0", got)
	}
	if got := s.silentFor("a", false, t0.Add(silentPatience)); got != silentPatience {
		t.Errorf("still silent: %s, want %s", got, silentPatience)
	}
	if got := s.silentFor("b", false, t0.Add(silentPatience)); got != 0 {
		t.Errorf("another pod: %s, want 0", got)
	}
	if got := s.silentFor("a", true, t0.Add(silentPatience)); got != 0 {
		t.Errorf("answered: %s, want 0", got)
	}
	if got := s.silentFor("a", false, t0.Add(2*silentPatience)); got != 0 {
		t.Errorf("silent again after an answer: %s, want 0 (counted anew)", got)
	}
}
