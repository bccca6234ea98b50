package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/scheme"
	daytwowebhook "github.com/daytwo-dev/daytwo/internal/webhook"
)

// Env is a running envtest control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	// Cache reads the informer cache of the first operator started on e
	// (the one Main runs): what its controllers see, for a test that must
	// wait until they can see a change.
	Cache client.Reader
	env   *envtest.Environment
	// webhookServed: one operator serves the webhook at envtest's address.
	webhookServed bool
}

// RepoRoot is the root of the daytwo source tree.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// assets returns the directory of the etcd and kube-apiserver binaries:
// KUBEBUILDER_ASSETS, or the cache hack/build-k8s.sh fills.
func assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(home, ".cache", "daytwo", "k8s-v1.36.3")
	if cache := os.Getenv("DAYTWO_CACHE"); cache != "" {
		dir = filepath.Join(cache, "k8s-v1.36.3")
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("no kube-apiserver in %s: run `make tools` or set KUBEBUILDER_ASSETS", dir)
	}
	return dir, nil
}

// setLogger gives controller-runtime its logger once: the operator's log
// on stderr with DAYTWO_TEST_LOG=1 (reconcile errors, say), none
// otherwise (without one it prints a warning and a stack into a test's
// output).
var setLogger = sync.OnceFunc(func() {
	if os.Getenv("DAYTWO_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
		return
	}
	ctrl.SetLogger(logr.Discard())
})

// Start starts a control plane with the CRDs from config/crd/bases. Call it
// from TestMain and Stop it when the tests are done.
func Start() (*Env, error) {
	setLogger()
	dir, err := assets()
	if err != nil {
		return nil, err
	}
	e := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// The real API server calls the operator's webhook, at an address
		// and with a certificate envtest sets up.
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(RepoRoot(), "config", "webhook", "manifests.yaml")}},
		BinaryAssetsDirectory: dir,
	}
	return start(e)
}

// StartCRDs starts a control plane with the CRDs and no webhook: for
// operators run as their own processes, which then serve none.
func StartCRDs() (*Env, error) {
	setLogger()
	dir, err := assets()
	if err != nil {
		return nil, err
	}
	return start(&envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: dir,
	})
}

// StartEmpty starts a control plane with nothing installed: no CRDs, no
// webhook. An install under test (the Helm chart) brings its own.
func StartEmpty() (*Env, error) {
	setLogger()
	dir, err := assets()
	if err != nil {
		return nil, err
	}
	return start(&envtest.Environment{BinaryAssetsDirectory: dir})
}

func start(e *envtest.Environment) (*Env, error) {
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("failed to start envtest: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("failed to create a client: %w", err)
	}
	return &Env{Config: cfg, Client: c, env: e}, nil
}

// WriteKubeconfig writes an admin kubeconfig to path, for a process the
// test starts.
func (e *Env) WriteKubeconfig(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, e.env.KubeConfig, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// Namespace creates a fresh namespace for one test and deletes it afterwards.
func (e *Env) Namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("failed to create a namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// StartOperator starts the control plane and runs daytwo's controllers
// against it, wired exactly as `daytwo operator` wires them. stop ends both.
func StartOperator() (env *Env, stop func() error, err error) {
	return StartOperatorWith(operator.Options{})
}

// StartOperatorWith is StartOperator with options (a fake clock, say).
func StartOperatorWith(opts operator.Options) (env *Env, stop func() error, err error) {
	env, err = Start()
	if err != nil {
		return nil, nil, err
	}
	stopOperator, err := env.StartOperator(opts)
	if err != nil {
		_ = env.Stop()
		return nil, nil, err
	}
	stop = func() error {
		return errors.Join(stopOperator(), env.Stop())
	}
	return env, stop, nil
}

// StartOperator runs one more daytwo operator against e, as a restarted or
// a second (leader election lost) operator would: a fresh cache, the same
// metrics registry. stop ends it.
func (e *Env) StartOperator(opts operator.Options) (stop func() error, err error) {
	var server webhook.Server
	if !e.webhookServed {
		w := e.env.WebhookInstallOptions
		server = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		WebhookServer: server,
		Scheme:        scheme.New(),
		Cache:         operator.CacheOptions(),
		Metrics:       metricsserver.Options{BindAddress: "0"},
		// Controller names are unique per process, not per manager.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	ctx, cancel := context.WithCancel(context.Background())
	if err == nil {
		err = operator.SetupControllers(ctx, mgr, opts)
	}
	if err == nil && server != nil {
		err = daytwowebhook.Setup(mgr)
		e.webhookServed = err == nil
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("failed to set up the operator: %w", err)
	}
	if e.Cache == nil {
		e.Cache = mgr.GetCache()
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() error {
		cancel()
		return <-done
	}, nil
}
