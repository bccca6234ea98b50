package databasebackup

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller"
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
	condition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_backup_condition",
		Help: "1 while the DatabaseBackup's condition is True, 0 while it is False or Unknown; no series before it is first set. " +
			"Verified is the last finished verification's result: 1 succeeded, 0 failed.",
	}, append(slices.Clone(labelNames), "condition"))
	registerOnce sync.Once
)

// exportedConditions are the conditions the alerts read.
var exportedConditions = []string{v1alpha1.ConditionReady, v1alpha1.ConditionLastRunFailed, v1alpha1.ConditionBackupStale, v1alpha1.ConditionVerified}

func registerMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(lastSuccess, duration, size, failures, verification, condition)
	})
}

// observeConditions exports b's conditions as they are written. Verified
// is the last finished verification's result, not the condition: that is
// False while a verification runs, which is no failure.
func observeConditions(b *v1alpha1.DatabaseBackup) {
	// A changed databaseRef changes the labels: the old series go.
	controller.ForgetSeries(prometheus.Labels{"namespace": b.Namespace, "backup": b.Name}, condition)
	l := labelsOf(b)
	for _, name := range exportedConditions {
		l["condition"] = name
		if name == v1alpha1.ConditionVerified {
			if v := b.Status.LastVerification; v != nil {
				condition.With(l).Set(map[bool]float64{true: 1}[v.Result == v1alpha1.VerificationSucceeded])
			}
			continue
		}
		if c := meta.FindStatusCondition(b.Status.Conditions, name); c != nil {
			condition.With(l).Set(map[bool]float64{true: 1}[c.Status == metav1.ConditionTrue])
		}
	}
}

// forget drops every series of a DatabaseBackup that is gone.
func forget(key client.ObjectKey) {
	controller.ForgetSeries(prometheus.Labels{"namespace": key.Namespace, "backup": key.Name},
		lastSuccess, duration, size, failures, verification, condition)
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
