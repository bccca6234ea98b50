package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/daytwo-dev/daytwo/test/bench/kwokop"
)

// serverWrites counts the API server's mutating requests so far by
// "verb resource", its reads (GET, LIST) under readPrefix, its request
// seconds under durationPrefix and its CPU seconds under serverCPU: every
// client's, the operator's, the bench's, the controller manager's and
// kwok's.
func (b *bench) serverWrites(ctx context.Context) (map[string]float64, error) {
	body, err := b.raw.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range families["process_cpu_seconds_total"].GetMetric() {
		out[serverCPU] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out[durationPrefix+l["verb"]+" "+l["resource"]+"/"+l["subresource"]] += m.GetHistogram().GetSampleSum()
	}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE":
			out[key] += m.GetCounter().GetValue()
		case "GET", "LIST":
			out[readPrefix+key] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// serverCPU is the key of the API server's CPU seconds in serverWrites.
const serverCPU = "cpu"

// durationPrefix marks the API server's request seconds in serverWrites.
const durationPrefix = "seconds "

// readPrefix marks the API server's reads (GET, LIST) in serverWrites.
const readPrefix = "read "

// printWrites prints the API server's writes between two serverWrites
// readings, per WebApp, most first.
func printWrites(phase string, before, after map[string]float64, n int) {
	writes := kwokop.Growth(before, after, func(k string) (string, bool) {
		return k, k != serverCPU && !strings.HasPrefix(k, durationPrefix) && !strings.HasPrefix(k, readPrefix)
	})
	total := 0.0
	for _, r := range writes {
		total += r.By
	}
	fmt.Printf("API server during %s: %.1f CPU seconds, %.0f writes (%.1f per WebApp)", phase, after[serverCPU]-before[serverCPU], total, total/float64(n))
	for _, r := range writes {
		if r.By/float64(n) >= 0.05 {
			fmt.Printf("; %s %.2f", r.Key, r.By/float64(n))
		}
	}
	fmt.Println()
	prefixed := func(prefix string) func(string) (string, bool) {
		return func(k string) (string, bool) { return strings.CutPrefix(k, prefix) }
	}
	reads := kwokop.Growth(before, after, prefixed(readPrefix))
	fmt.Printf("  reads per WebApp:")
	for _, r := range reads[:min(6, len(reads))] {
		fmt.Printf(" %s %.2f;", r.Key, r.By/float64(n))
	}
	fmt.Println()
	slow := kwokop.Growth(before, after, prefixed(durationPrefix))
	fmt.Printf("  request seconds by verb and resource:")
	for _, r := range slow[:min(8, len(slow))] {
		fmt.Printf(" %s %.1f;", r.Key, r.By)
	}
	fmt.Println()
}
