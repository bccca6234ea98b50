package main

import (
	"fmt"
	"slices"
	"time"
)

// A round is one run of each side: the two floors with the WebApp kind
// (0 when skipped) and the operator, each on a fresh cluster of its own.
// BENCH_ROUNDS rounds run, and the BENCH line reports medians: one run
// moves by about 15 % from the next on a 2-core machine, more than the
// goal's margin. The bare client runs once.
type round struct {
	creates, protocol time.Duration
	op                opRun
}

// median is the median of of(round) over the rounds (the mean of the
// middle two of an even count).
func median(rounds []round, of func(round) time.Duration) time.Duration {
	return time.Duration(medianFloat(rounds, func(rd round) float64 { return float64(of(rd)) }))
}

// medianRatio is the median of the rounds' ratios of the operator's time
// over floor's, 0 when that floor was skipped.
func medianRatio(rounds []round, floor func(round) time.Duration) float64 {
	return medianFloat(rounds, func(rd round) float64 { return ratio(rd.op.took, floor(rd)) })
}

// medianFloat is median for any figure of a round.
func medianFloat(rounds []round, of func(round) float64) float64 {
	v := make([]float64, len(rounds))
	for i, rd := range rounds {
		v[i] = of(rd)
	}
	slices.Sort(v)
	return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
}

// ratio is the operator's time over a floor's, 0 when it was skipped.
func ratio(op, floor time.Duration) float64 {
	if floor == 0 {
		return 0
	}
	return op.Seconds() / floor.Seconds()
}

// floatText is v as the BENCH line prints it, and secondsText d: n/a
// for what a skipped floor leaves at 0, not a 0 a reader could take for
// a figure.
func floatText(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func secondsText(d time.Duration) string { return floatText(d.Seconds()) }
