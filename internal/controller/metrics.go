package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's own decisions, beside controller-runtime's reconcile
// figures (controller_runtime_reconcile_*) on the same endpoint.
var (
	rollbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_rollbacks_total", Help: "Rollouts daytwo rolled back to the last good revision, by kind.",
	}, []string{"kind", "namespace", "name"})
	remediations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_remediations_total", Help: "Repairs daytwo made without being asked, by kind and action.",
	}, []string{"kind", "namespace", "name", "action"})
	registerOnce sync.Once
)

// RegisterMetrics registers the figures above with controller-runtime's
// registry, once.
func RegisterMetrics() {
	registerOnce.Do(func() { crmetrics.Registry.MustRegister(rollbacks, remediations) })
}

// CountRollback counts a rollback of obj, a kind.
func CountRollback(kind string, obj client.Object) {
	rollbacks.WithLabelValues(kind, obj.GetNamespace(), obj.GetName()).Inc()
}

// InitCounts makes obj's counters exist at 0, for each of its actions:
// increase() then sees the first event.
func InitCounts(kind string, obj client.Object, actions ...string) {
	rollbacks.WithLabelValues(kind, obj.GetNamespace(), obj.GetName())
	for _, a := range actions {
		remediations.WithLabelValues(kind, obj.GetNamespace(), obj.GetName(), a)
	}
}

// ForgetCounts drops the counters of an object that is gone.
func ForgetCounts(kind string, key client.ObjectKey) {
	ForgetSeries(prometheus.Labels{"kind": kind, "namespace": key.Namespace, "name": key.Name}, rollbacks, remediations)
}

// ForgetSeries drops the series of vecs that carry every label of match:
// those of an object that is gone.
func ForgetSeries(match prometheus.Labels, vecs ...interface{ DeletePartialMatch(prometheus.Labels) int }) {
	for _, v := range vecs {
		v.DeletePartialMatch(match)
	}
}

// CountRemediation counts a repair of obj, a kind.
func CountRemediation(kind string, obj client.Object, action string) {
	remediations.WithLabelValues(kind, obj.GetNamespace(), obj.GetName(), action).Inc()
}
