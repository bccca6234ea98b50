package kwokop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/scheme"
)

// Operator is the operator binary run on this host against KUBECONFIG.
type Operator struct {
	// Bin is the daytwo binary; Name names its log file.
	Bin, Name string
	// Parallel is its reconciles at once, per controller.
	Parallel int
	cmd      *exec.Cmd
	metrics  string
}

// Start runs the operator with production flags, except that leader
// election is off so a restart does not wait out a lease, pprof is on, and
// the client's QPS budget matches a bench's own. BENCH_OPERATOR_ARGS adds
// flags (--zap-log-level=debug shows every write), BENCH_OPERATOR_GODEBUG
// sets GODEBUG (memprofilerate=1: a heap profile that counts every object)
// and BENCH_OPERATOR_GOGC its garbage collector's target (GOGC itself
// would reach the kwok cluster's processes too).
func (o *Operator) Start() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	o.metrics = l.Addr().String()
	_ = l.Close()
	log, err := os.Create(os.TempDir() + "/" + o.Name + "-operator.log")
	if err != nil {
		return err
	}
	args := append([]string{"operator", "--metrics-bind-address=" + o.metrics, "--metrics-secure=false", "--health-probe-bind-address=0",
		"--kube-api-qps=500", "--kube-api-burst=1000", "--enable-pprof", fmt.Sprintf("--max-concurrent-reconciles=%d", o.Parallel)},
		strings.Fields(os.Getenv("BENCH_OPERATOR_ARGS"))...)
	o.cmd = exec.Command(o.Bin, args...)
	o.cmd.Stdout, o.cmd.Stderr = log, log
	for from, to := range map[string]string{"BENCH_OPERATOR_GODEBUG": "GODEBUG", "BENCH_OPERATOR_GOGC": "GOGC"} {
		if v := os.Getenv(from); v != "" {
			if o.cmd.Env == nil {
				o.cmd.Env = os.Environ()
			}
			o.cmd.Env = append(o.cmd.Env, to+"="+v)
		}
	}
	err = o.cmd.Start()
	_ = log.Close() // the operator holds its own descriptor
	if err != nil {
		o.cmd = nil
		return err
	}
	for range 100 {
		if _, err := o.Scrape(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	o.Stop()
	return fmt.Errorf("operator metrics never answered; see %s", log.Name())
}

// Stop stops the operator as Kubernetes would, and waits for it.
func (o *Operator) Stop() {
	if o.cmd == nil || o.cmd.Process == nil {
		return
	}
	_ = o.cmd.Process.Signal(os.Interrupt)
	_ = o.cmd.Wait()
	o.cmd = nil
}

func (o *Operator) get(path string) ([]byte, error) {
	resp, err := http.Get("http://" + o.metrics + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

func (o *Operator) families() (map[string]*dto.MetricFamily, error) {
	raw, err := o.get("/metrics")
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(string(raw)))
}

// Scrape returns the operator's counters and gauges as name and
// name{label=value} -> the sum over the series.
func (o *Operator) Scrape() (map[string]float64, error) {
	families, err := o.families()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[name] += v
			for _, l := range m.GetLabel() {
				out[name+"{"+l.GetName()+"="+l.GetValue()+"}"] += v
			}
		}
	}
	return out, nil
}

// Writes counts the operator's mutating requests to the API server so far.
func (o *Operator) Writes() (float64, error) {
	m, err := o.Scrape()
	if err != nil {
		return 0, err
	}
	w := 0.0
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		w += m["rest_client_requests_total{method="+method+"}"]
	}
	return w, nil
}

// Requests counts the operator's requests so far: to the API server,
// reads and writes, and to the instance managers' API.
func (o *Operator) Requests() (apiServer, instances float64, err error) {
	m, err := o.Scrape()
	if err != nil {
		return 0, 0, err
	}
	return m["rest_client_requests_total"], m["daytwo_instance_api_requests_total"], nil
}

// Histogram is a cumulative histogram's buckets: upper bound -> count.
type Histogram map[float64]float64

// Histogram sums the buckets of name's series whose label matches.
func (o *Operator) Histogram(name, label, value string) (Histogram, error) {
	families, err := o.families()
	if err != nil {
		return nil, err
	}
	h := Histogram{}
	for _, m := range families[name].GetMetric() {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	return h, nil
}

// Quantile is the upper bound of the bucket that holds quantile q of the
// observations made between before and h (h minus before): a bound, as
// precise as the buckets.
func (h Histogram) Quantile(before Histogram, q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	total := h[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0
	}
	for _, b := range bounds {
		if h[b]-before[b] >= q*total {
			return b
		}
	}
	return math.Inf(1)
}

// Heap is the operator's heap right after a garbage collection, read from
// the heap profile's MemStats (gc=1 collects first): inuse counts whole
// spans holding live objects (what the process pays, fragmentation
// included), live only the live objects' bytes.
func (o *Operator) Heap() (inuse, live float64, err error) {
	raw, err := o.get("/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(raw), "\n") {
		for prefix, v := range map[string]*float64{"# HeapInuse = ": &inuse, "# HeapAlloc = ": &live} {
			if s, ok := strings.CutPrefix(line, prefix); ok {
				if *v, err = strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil {
					return 0, 0, err
				}
				found++
			}
		}
	}
	if found != 2 {
		return 0, 0, errors.New("no HeapInuse and HeapAlloc in the heap profile")
	}
	return inuse, live, nil
}

// MeasuredHeap is Heap, and writes the heap profile to BENCH_HEAP_PROFILE
// when it is set (go tool pprof reads it).
func (o *Operator) MeasuredHeap() (inuse, live float64, err error) {
	if inuse, live, err = o.Heap(); err != nil {
		return 0, 0, err
	}
	if path := os.Getenv("BENCH_HEAP_PROFILE"); path != "" {
		err = o.SaveHeapProfile(path)
	}
	return inuse, live, err
}

// EnvInt is the positive integer in the environment variable name, or def.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// SaveHeapProfile writes the operator's heap profile to path.
func (o *Operator) SaveHeapProfile(path string) error {
	raw, err := o.get("/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

// Clients are a bench's own clients of KUBECONFIG's cluster, with a QPS
// budget to match the operator's.
func Clients() (client.WithWatch, rest.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, nil, err
	}
	rc.QPS, rc.Burst = 500, 1000
	c, err := client.NewWithWatch(rc, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return c, cs.Discovery().RESTClient(), nil
}

// Namespace deletes namespace name if it is there, and creates it afresh.
func Namespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_ = c.Delete(ctx, ns)
	for range 600 {
		if err := c.Create(ctx, ns); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("namespace %s never became creatable", name)
}

// FreshCluster replaces the kwok cluster with an empty one of the same
// nodes, with daytwo's CRDs served; the callers' clients must be made anew.
func FreshCluster(ctx context.Context) error {
	for _, args := range [][]string{{"hack/kwok-cluster.sh", "down"}, {"hack/kwok-cluster.sh", "up"},
		{"kubectl", "--kubeconfig", os.Getenv("KUBECONFIG"), "apply", "--server-side", "-k", "config/crd"}} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
	}
	// Served before the operator starts: its controllers look the kinds
	// up once.
	return CRDsEstablished(ctx, time.Minute)
}

// CRDsEstablished waits until daytwo's CRDs report Established. It reads
// them itself: `kubectl wait --for=condition=Established` fails at once,
// rather than waits, on a CRD whose status has no conditions yet.
func CRDsEstablished(ctx context.Context, timeout time.Duration) error {
	c, _, err := Clients()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for _, name := range []string{"webapps.daytwo.dev", "databases.daytwo.dev", "databasebackups.daytwo.dev"} {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		var last error
		for {
			if last = c.Get(ctx, client.ObjectKey{Name: name}, crd); last == nil {
				conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
				if slices.ContainsFunc(conds, func(c any) bool {
					m, _ := c.(map[string]any)
					return m["type"] == "Established" && m["status"] == "True"
				}) {
					break
				}
			}
			if time.Now().After(deadline) {
				if last != nil {
					return fmt.Errorf("CRD %s not read after %s: %w", name, timeout, last)
				}
				return fmt.Errorf("CRD %s not Established after %s", name, timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// Parallel runs f(i) for i in [0,n) on p workers and returns the first error.
func Parallel(n, p int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
