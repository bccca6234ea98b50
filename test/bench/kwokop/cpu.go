package kwokop

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"k8s.io/client-go/rest"

	"github.com/daytwo-dev/daytwo/internal/procfs"
)

// CPUProfile saves, when BENCH_CPU_PROFILE names a directory, a CPU
// profile of seconds of the API server (raw is its REST client) and, when
// o is not nil, of the operator, as DIR/NAME-apiserver.pprof and
// DIR/NAME-operator.pprof. It returns at once; wait blocks until both are
// written.
func CPUProfile(ctx context.Context, raw rest.Interface, o *Operator, name string, seconds int) (wait func()) {
	dir := os.Getenv("BENCH_CPU_PROFILE")
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	save := func(file string, get func() ([]byte, error)) {
		wg.Go(func() {
			body, err := get()
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, file), body, 0o600)
			}
			if err != nil {
				fmt.Printf("  CPU profile %s: %v\n", file, err)
			}
		})
	}
	save(name+"-apiserver.pprof", func() ([]byte, error) {
		return raw.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	})
	if o != nil {
		save(name+"-operator.pprof", func() ([]byte, error) { return o.get("/debug/pprof/profile?seconds=" + strconv.Itoa(seconds)) })
	}
	return wg.Wait
}

// ProcessCPU returns the CPU seconds (user and system) every process on
// this machine has used so far, summed by command name as the kernel
// shortens it: the kwok cluster's parts (kube-apiserver, etcd,
// kube-controller, kube-scheduler, kwok-controller), the operator
// (daytwo) and the bench (webapp), so the difference of two readings says
// where a run's CPU went. A process that ends between two readings takes
// its seconds with it, which can hide another's of the same name.
func ProcessCPU() map[string]float64 {
	out := map[string]float64{}
	for _, st := range procfs.Stats() {
		user, err1 := strconv.ParseFloat(st.Field(14), 64)
		sys, err2 := strconv.ParseFloat(st.Field(15), 64)
		if err1 == nil && err2 == nil {
			out[st.Comm] += (user + sys) / clockTicks
		}
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go builds for.
const clockTicks = 100

// PrintProcessCPU prints the CPU seconds by command between two
// ProcessCPU readings, most first, leaving out less than 0.1 s.
func PrintProcessCPU(phase string, before, after map[string]float64) {
	rows := Growth(before, after, func(name string) (string, bool) {
		return name, after[name]-before[name] >= 0.1
	})
	total := 0.0
	for _, r := range rows {
		total += r.By
	}
	fmt.Printf("  CPU by process during %s: %.1f s;", phase, total)
	for _, r := range rows {
		fmt.Printf(" %s %.1f;", r.Key, r.By)
	}
	fmt.Println()
}

// Increase is how much a counter grew between two readings.
type Increase struct {
	Key string
	By  float64
}

// Growth returns the counters of after that grew since before, most
// first, among those keep passes, under the name it gives them.
func Growth(before, after map[string]float64, keep func(key string) (string, bool)) []Increase {
	var out []Increase
	for k, v := range after {
		if name, ok := keep(k); ok && v > before[k] {
			out = append(out, Increase{name, v - before[k]})
		}
	}
	slices.SortFunc(out, func(a, b Increase) int { return cmp.Compare(b.By, a.By) })
	return out
}
