package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/daytwo-dev/daytwo/internal/operator"
	"github.com/daytwo-dev/daytwo/internal/scheme"
	"github.com/daytwo-dev/daytwo/internal/version"
	daytwowebhook "github.com/daytwo-dev/daytwo/internal/webhook"
)

type operatorOptions struct {
	metricsAddr             string
	metricsSecure           bool
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	// lease, renew and retry time the leader election (controller-runtime's
	// defaults: 15 s, 10 s, 2 s).
	lease, renew, retry time.Duration
	qps                 float32
	pprof               bool
	concurrency         int
	burst               int
	instanceImage       string
	poolerImage         string
	watchNamespaces     []string
	webhook             webhookOptions
	zap                 zap.Options
}

// webhookOptions configure the validating webhook and its certificate.
type webhookOptions struct {
	port                                int
	certDir, service, secret, configKey string
}

func newOperatorCommand() *cobra.Command {
	o := &operatorOptions{zap: zap.Options{Development: false}}
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the daytwo controller manager",
		Long: "Run the daytwo controller manager.\n\nUnless GOGC is set in its environment, it runs Go's garbage collector at GOGC=" +
			strconv.Itoa(operatorGOGC) + ": its heap is mostly the informer cache, and a lower target keeps the heap in use near the live objects for a little CPU.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOperator(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint; \"0\" disables it.")
	f.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers whose token may get /metrics (TokenReview and SubjectAccessReview); "+
		"false serves plain HTTP to anyone who reaches the port.")
	f.StringSliceVar(&o.watchNamespaces, "watch-namespaces", nil, "Namespaces whose daytwo objects the operator reconciles, and the only ones it reads or writes; "+
		"empty means every namespace. With it, Roles in those namespaces are all the operator needs (config/namespaced).")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so only one replica reconciles at a time.")
	f.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; defaults to the pod's namespace.")
	f.DurationVar(&o.lease, "leader-election-lease-duration", 15*time.Second, "How long a standby waits after the leader's last renewal before it takes over.")
	f.DurationVar(&o.renew, "leader-election-renew-deadline", 10*time.Second, "How long the leader retries renewing before it steps down; shorter than the lease duration.")
	f.DurationVar(&o.retry, "leader-election-retry-period", 2*time.Second, "How often the replicas try to acquire or renew the Lease; shorter than the renew deadline.")
	f.BoolVar(&o.pprof, "enable-pprof", false, "Serve Go's /debug/pprof/ on the metrics endpoint (for benchmarks and debugging).")
	f.IntVar(&o.concurrency, "max-concurrent-reconciles", 4, "Objects of one kind reconciled in parallel.")
	f.Float32Var(&o.qps, "kube-api-qps", 50, "Requests per second the operator may send to the API server.")
	f.IntVar(&o.burst, "kube-api-burst", 100, "Burst of requests above kube-api-qps.")
	f.StringVar(&o.instanceImage, "instance-image", operator.DefaultInstanceImage(), "daytwo image whose binary PostgreSQL pods run as their instance manager.")
	f.StringVar(&o.poolerImage, "pooler-image", operator.DefaultPoolerImage, "PgBouncer image of Databases' pools (spec.pooler), unless a Database names one.")
	f.IntVar(&o.webhook.port, "webhook-port", 0, "Port of the validating webhook; 0 serves none (config/default sets 9443).")
	f.StringVar(&o.webhook.certDir, "webhook-cert-dir", "/tmp/daytwo-webhook", "Where the webhook's serving certificate is written.")
	f.StringVar(&o.webhook.service, "webhook-service", "daytwo-webhook", "Service in the operator's namespace that reaches the webhook.")
	f.StringVar(&o.webhook.secret, "webhook-secret", "daytwo-webhook-cert", "Secret in the operator's namespace that keeps the webhook's CA and certificate.")
	f.StringVar(&o.webhook.configKey, "webhook-configuration", "daytwo-validating-webhook", "ValidatingWebhookConfiguration whose caBundle daytwo sets.")
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.zap.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	return cmd
}

// operatorGOGC is the operator's garbage collector target when GOGC is
// not set: its heap is mostly the informer cache, long-lived objects that
// each watch event replaces, and at Go's default of 100 the replacements
// leave spans partly filled until the heap in use is about twice the live
// objects. At 25 it stays near 1.4 times, for little CPU: docs/benchmarks.md's
// WebApp benchmark has the figures.
const operatorGOGC = 25

func runOperator(cmd *cobra.Command, o *operatorOptions) error {
	// client-go's own rule: renew > 1.2 × retry, and lease > renew.
	if !(0 < o.retry && float64(o.renew) > 1.2*float64(o.retry) && o.renew < o.lease) {
		return fmt.Errorf("--leader-election-renew-deadline (%s) must exceed 1.2 × --leader-election-retry-period (%s) "+
			"and stay below --leader-election-lease-duration (%s), all above 0", o.renew, o.retry, o.lease)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	log := ctrl.Log.WithName("setup")
	gogc, set := os.LookupEnv("GOGC")
	if !set {
		debug.SetGCPercent(operatorGOGC)
		gogc = strconv.Itoa(operatorGOGC)
	}

	metricsOpts := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.metricsSecure,
		// HTTP/2 is off: it is open to the stream-reset and rapid-reset CVEs.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if o.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	if o.pprof {
		metricsOpts.ExtraHandlers = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/heap":    pprof.Handler("heap"),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to load a kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	var webhookServer webhook.Server
	var certs *daytwowebhook.Certs
	if o.webhook.port != 0 {
		if webhookServer, certs, err = prepareWebhook(cmd.Context(), cfg, o.webhook); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		WebhookServer:                 webhookServer,
		Scheme:                        scheme.New(),
		Cache:                         operator.CacheOptions(o.watchNamespaces...),
		Controller:                    config.Controller{MaxConcurrentReconciles: o.concurrency},
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "daytwo.daytwo.dev",
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.lease,
		RenewDeadline:                 &o.renew,
		RetryPeriod:                   &o.retry,
	})
	if err != nil {
		return fmt.Errorf("failed to create the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := operator.SetupControllers(ctx, mgr, operator.Options{InstanceImage: o.instanceImage, PoolerImage: o.poolerImage, WatchNamespaces: o.watchNamespaces}); err != nil {
		return err
	}
	if webhookServer != nil {
		if err := daytwowebhook.Setup(mgr); err != nil {
			return err
		}
		// Every replica serves the webhook, leader or not.
		if err := mgr.Add(everyReplica(certs.Run)); err != nil {
			return fmt.Errorf("failed to add the webhook certificate's renewal: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the ready check: %w", err)
	}
	log.Info("Starting the daytwo operator", "version", version.Version, "GOGC", gogc)
	return mgr.Start(ctx)
}

// prepareWebhook puts the webhook's certificate in place (creating or
// renewing it, and setting the configuration's caBundle) and returns the
// server that serves it.
func prepareWebhook(ctx context.Context, cfg *rest.Config, o webhookOptions) (webhook.Server, *daytwowebhook.Certs, error) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		return nil, nil, errors.New("the webhook needs POD_NAMESPACE, the operator's namespace")
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create a client: %w", err)
	}
	certs := &daytwowebhook.Certs{Client: c, Namespace: ns, Service: o.service, Secret: o.secret,
		Configuration: o.configKey, Dir: o.certDir}
	if err := certs.Ensure(ctx); err != nil {
		return nil, nil, fmt.Errorf("failed to prepare the webhook certificate: %w", err)
	}
	// The server's certificate watcher reloads the files certs.Run renews.
	return webhook.NewServer(webhook.Options{Port: o.port, CertDir: o.certDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}}), certs, nil
}

// everyReplica is a manager.Runnable that runs on every replica, not only
// the leader.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
