package databasebackup

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
)

var (
	labelNames  = []string{"namespace", "backup", "database"}
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_backup_last_success_timestamp_seconds", Help: "When the newest successful backup ended (Unix seconds).",
	}, labelNames)
	duration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_backup_duration_seconds", Help: "How long the newest successful backup took.",
	}, labelNames)
	size = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_backup_bytes", Help: "Size of the newest successful backup.",
	}, labelNames)
	failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_backup_failures_total", Help: "Backup runs that failed.",
	}, labelNames)
	verification = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_backup_verification_seconds", Help: "How long the newest verification restore took.",
	}, labelNames)
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(lastSuccess, duration, size, failures, verification)
	})
}

func labelsOf(b *v1alpha1.DatabaseBackup) prometheus.Labels {
	return prometheus.Labels{"namespace": b.Namespace, "backup": b.Name, "database": b.Spec.DatabaseRef.Name}
}

func observeSuccess(b *v1alpha1.DatabaseBackup, res backup.Result) {
	l := labelsOf(b)
	lastSuccess.With(l).Set(float64(res.End.Unix()))
	duration.With(l).Set(res.DurationSeconds)
	size.With(l).Set(float64(res.Bytes))
}

func observeFailure(b *v1alpha1.DatabaseBackup) { failures.With(labelsOf(b)).Inc() }

func observeVerification(b *v1alpha1.DatabaseBackup, seconds float64) {
	verification.With(labelsOf(b)).Set(seconds)
}
