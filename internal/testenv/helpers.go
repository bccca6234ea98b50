package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daytwo-dev/daytwo/internal/operator"
)

// Main runs a package's tests against a control plane with the operator
// running (wired with opts), sets *env for them, and exits.
func Main(m *testing.M, env **Env, opts operator.Options) {
	e, stop, err := StartOperatorWith(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		code = 1
	}
	os.Exit(code)
}

// Eventually polls cond until it holds, failing the test after 20 s with
// the last error cond returned.
func Eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok && err == nil, nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
	}
}

// Update re-reads obj, applies mutate and writes it, retrying on conflicts
// with the operator's own writes.
func (e *Env) Update(t *testing.T, obj client.Object, mutate func()) {
	t.Helper()
	e.update(t, obj, mutate, func(ctx context.Context, o client.Object) error { return e.Client.Update(ctx, o) })
}

// UpdateStatus is Update for the status subresource: tests play the parts
// of absent controllers (the StatefulSet controller, the kubelet) while the
// operator labels and patches the same objects.
func (e *Env) UpdateStatus(t *testing.T, obj client.Object, mutate func()) {
	t.Helper()
	e.update(t, obj, mutate, func(ctx context.Context, o client.Object) error { return e.Client.Status().Update(ctx, o) })
}

func (e *Env) update(t *testing.T, obj client.Object, mutate func(), write func(context.Context, client.Object) error) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return write(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("update %s: %v", obj.GetName(), err)
	}
}

// SumMetric adds up the samples of the operator's metric name that carry
// the label key=value.
func SumMetric(t *testing.T, name, key, value string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}
