//go:build e2e

package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/daytwo-dev/daytwo/internal/scheme"
)

// Mode is the kind of cluster under test.
type Mode string

const (
	// ModeKwok is a control plane with simulated nodes: objects, no processes.
	ModeKwok Mode = "kwok"
	// ModeReal is a real kubelet running real containers.
	ModeReal Mode = "real"
)

// Cluster is the cluster under test.
type Cluster struct {
	Mode   Mode
	Config *rest.Config
	Client client.Client
	Kube   kubernetes.Interface
	// operatorRestarts are the operator container's restarts a suite
	// caused on purpose (AllowOperatorRestarts); CheckOperator allows them.
	operatorRestarts int32
}

// Connect reads KUBECONFIG and DAYTWO_E2E_MODE.
func Connect() (*Cluster, error) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return nil, fmt.Errorf("KUBECONFIG is not set: run the suites through `make test-e2e`")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("failed to load %s: %w", path, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	// The API server's warnings (a namespace relabelled over pods that
	// break its new level, say) are part of a suite's output.
	cfg.WarningHandler = rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true})
	sch := scheme.New()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mode := Mode(os.Getenv("DAYTWO_E2E_MODE"))
	if mode == "" {
		mode = ModeKwok
	}
	return &Cluster{Mode: mode, Config: cfg, Client: c, Kube: kube}, nil
}

// RepoRoot is the root of the daytwo source tree.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// CacheDir is where make builds its tools: $DAYTWO_CACHE, else
// ~/.cache/daytwo.
func CacheDir() string {
	if c := os.Getenv("DAYTWO_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "daytwo")
}

// given are the namespaces a namespaced install watches
// (DAYTWO_E2E_NAMESPACES), handed one to each suite: the operator reaches
// no other.
var given struct {
	sync.Mutex
	next int
}

// Namespace creates a fresh namespace for one suite and deletes it
// afterwards; against a namespaced install, it hands out the next of the
// namespaces the operator watches, and leaves it (deleting it would take
// the operator's Role away while it still cleans up).
func (c *Cluster) Namespace(t *testing.T) string {
	t.Helper()
	if list := os.Getenv("DAYTWO_E2E_NAMESPACES"); list != "" {
		names := strings.Split(list, ",")
		given.Lock()
		i := given.next
		given.next++
		given.Unlock()
		if i >= len(names) {
			t.Fatalf("the namespaced install watches %d namespaces (%s); this suite needs one more", len(names), list)
		}
		t.Cleanup(func() { c.endNamespace(t, names[i]) })
		return names[i]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Labels: map[string]string{"daytwo.dev/e2e": "true"}}}
	if err := c.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("failed to create a namespace: %v", err)
	}
	t.Cleanup(func() {
		c.endNamespace(t, ns.Name)
		_ = c.Client.Delete(context.Background(), ns)
	})
	return ns.Name
}

// endNamespace logs what a failed suite left in ns, and fails t for every
// secret of ns found where it must not be.
func (c *Cluster) endNamespace(t *testing.T, ns string) {
	if t.Failed() {
		c.dumpNamespace(t, ns)
	}
	found, err := c.ScanSecrets(context.Background(), ns)
	if err != nil {
		t.Errorf("secrets scan: %v", err)
	}
	for _, f := range found {
		t.Errorf("secret leaked: %s", f)
	}
}

// dumpNamespace logs what a failed suite left behind, to debug from CI output.
func (c *Cluster) dumpNamespace(t *testing.T, ns string) {
	pods, err := c.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s phase=%s conditions=%v", p.Name, p.Status.Phase, p.Status.Conditions)
		for _, s := range p.Status.ContainerStatuses {
			t.Logf("  container %s ready=%v restarts=%d state=%+v", s.Name, s.Ready, s.RestartCount, s.State)
			c.logTail(t, ns, p.Name, s.Name, false)
			if s.RestartCount > 0 {
				c.logTail(t, ns, p.Name, s.Name, true)
			}
		}
	}
	evs, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s/%s %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// logTail logs the last lines of a container's log, or of its previous
// run's.
func (c *Cluster) logTail(t *testing.T, ns, pod, container string, previous bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.Kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: previous,
		TailLines: ptr.To[int64](40)}).DoRaw(ctx)
	if err != nil {
		return
	}
	which := "log"
	if previous {
		which = "previous run's log"
	}
	t.Logf("  container %s %s, last lines:\n%s", container, which, strings.TrimRight(string(raw), "\n"))
}

// ApplyFile creates every object of a multi-document YAML file in ns.
func (c *Cluster) ApplyFile(t *testing.T, ns, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return c.ApplyYAML(t, ns, string(raw))
}

// ApplyYAML server-side applies every object of a multi-document YAML string in ns.
func (c *Cluster) ApplyYAML(t *testing.T, ns, docs string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range splitYAML(docs) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("bad manifest: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if ns != "" {
			u.SetNamespace(ns)
		}
		if err := c.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("daytwo-e2e"), client.ForceOwnership); err != nil {
			t.Fatalf("failed to apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		out = append(out, u)
	}
	return out
}

// Eventually polls cond every interval until it returns true or timeout passes.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// OperatorLogs is the operator pods' log lines from since on, each stamped
// with its time (real mode; diagnostics, as PodLogs).
func (c *Cluster) OperatorLogs(ctx context.Context, since time.Time) string {
	pods, err := c.Kube.CoreV1().Pods(OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: operatorSelector})
	if err != nil {
		return fmt.Sprintf("(no operator log: %v)", err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		b.WriteString(c.PodLogs(ctx, OperatorNamespace, p.Name, "", since))
	}
	return b.String()
}

// PodLogs is a container's log lines from since on, each stamped with its
// time: what an instance did around a fault. Errors are part of the text;
// it is diagnostics, not a check.
func (c *Cluster) PodLogs(ctx context.Context, ns, pod, container string, since time.Time) string {
	st := metav1.NewTime(since)
	raw, err := c.Kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, SinceTime: &st, Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(no log of %s/%s: %v)", pod, container, err)
	}
	return string(raw)
}
