package testenv

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// FinishJob writes into job the terminal status the Job controller would
// (envtest runs none): Complete after SuccessCriteriaMet, or Failed after
// FailureTarget, as the API server's validation asks. The caller updates
// the status subresource.
func FinishJob(job *batchv1.Job, now metav1.Time, ok bool) {
	job.Status.StartTime = &now
	if ok {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		return
	}
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded",
			Message: "Job has reached the specified backoff limit"}}
}

// ReadTarGz is the files of the tar.gz at path, by name (a support
// bundle, say).
func ReadTarGz(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(b)
	}
}
