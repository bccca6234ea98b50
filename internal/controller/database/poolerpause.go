package database

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// poolerPauseTimeout bounds how long a switchover waits for the
// transactions under way in a pool to finish; a pool that takes longer
// is resumed and the switchover goes on (its clients then see it).
const poolerPauseTimeout = 5 * time.Second

func (h haHost) PausePools(ctx context.Context, db *v1alpha1.Database) func(context.Context) {
	return h.r.pausePools(ctx, db)
}

// pausePools pauses every ready PgBouncer pod of db's pools, in
// parallel, and returns what resumes those it paused. A pod that cannot
// pause is told so in an event; it serves on unpaused. (A pod whose
// resume is lost resumes by itself: internal/pooler's maxPause.)
func (r *Reconciler) pausePools(ctx context.Context, db *v1alpha1.Database) func(context.Context) {
	noop := func(context.Context) {}
	// In session mode PAUSE waits for clients to disconnect, which they
	// do not: the switchover would wait out the timeout for nothing.
	if db.Spec.Pooler == nil || db.Spec.Pooler.PoolMode == v1alpha1.PoolModeSession {
		return noop
	}
	targets, err := r.poolTargets(ctx, db)
	if err != nil {
		controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "PoolerPause", "Pause",
			"The pools were not paused for the switchover: %v", err)
		return noop
	}
	var mu sync.Mutex
	var paused []instanceapi.Target
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			if err := r.Instances.PausePooler(ctx, t, poolerPauseTimeout); err != nil {
				controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "PoolerPause", "Pause",
					"PgBouncer %s did not pause for the switchover (its clients may see it): %v", t.IP, err)
				return
			}
			mu.Lock()
			paused = append(paused, t)
			mu.Unlock()
		})
	}
	wg.Wait()
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, t := range paused {
			wg.Go(func() {
				if err := r.Instances.ResumePooler(ctx, t); err != nil {
					controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "PoolerPause", "Resume",
						"PgBouncer %s did not resume (it resumes by itself shortly): %v", t.IP, err)
				}
			})
		}
		wg.Wait()
	}
}

// poolTargets are the API addresses of db's ready PgBouncer pods, with
// the TLS that verifies them (the pools' certificate, from the
// Database's CA) and presents the operator's client certificate.
func (r *Reconciler) poolTargets(ctx context.Context, db *v1alpha1.Database) ([]instanceapi.Target, error) {
	base, err := r.apiTLS(ctx, db)
	if err != nil {
		return nil, err
	}
	ca := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: caSecretName(db)}, ca); err != nil {
		return nil, fmt.Errorf("failed to get Secret %s: %w", caSecretName(db), err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.Data[pki.CACert]) {
		return nil, fmt.Errorf("secret %s has no CA certificate", ca.Name)
	}
	var out []instanceapi.Target
	for _, readOnly := range []bool{false, true} {
		// Pool pods are not in the cache (it holds the instances' only).
		pods := &corev1.PodList{}
		if err := r.APIReader.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels(poolerSelector(db, readOnly))); err != nil {
			return nil, fmt.Errorf("failed to list the pool's pods: %w", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.PodIP == "" || !podReady(p) || !p.DeletionTimestamp.IsZero() {
				continue
			}
			cfg := base.Clone()
			cfg.RootCAs = roots
			cfg.ServerName = db.PoolerName(readOnly) + "." + db.Namespace + ".svc"
			out = append(out, instanceapi.Target{IP: p.Status.PodIP, TLS: cfg, ServerName: cfg.ServerName})
		}
	}
	return out, nil
}
