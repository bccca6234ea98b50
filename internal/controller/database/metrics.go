package database

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

var (
	failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_database_failovers_total", Help: "Failovers: the primary lease moved to a replica after the primary lost it.",
	}, []string{"namespace", "database"})
	switchovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_database_switchovers_total", Help: "Switchover requests answered, by result.",
	}, []string{"namespace", "database", "result"})
	promotionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "daytwo_database_promotion_seconds",
		Help:    "From a failover's detection, or a switchover's start, to the new primary's promotion.",
		Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 30, 60},
	}, []string{"namespace", "database", "kind"})
	walPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_database_wal_archive_pending_files", Help: "WAL files the primary finished and has not archived yet.",
	}, []string{"namespace", "database"})
	walLastArchived = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_database_wal_last_archived_timestamp_seconds", Help: "When the primary last archived a WAL file: time() minus it is the archive's age.",
	}, []string{"namespace", "database"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(failovers, switchovers, promotionSeconds, walPending, walLastArchived)
	})
}

func countFailover(db *v1alpha1.Database) { failovers.WithLabelValues(db.Namespace, db.Name).Inc() }

func observeFailover(db *v1alpha1.Database, d time.Duration) {
	promotionSeconds.WithLabelValues(db.Namespace, db.Name, "failover").Observe(d.Seconds())
}

func countSwitchover(db *v1alpha1.Database, result v1alpha1.SwitchoverResult) {
	switchovers.WithLabelValues(db.Namespace, db.Name, string(result)).Inc()
}

func observeSwitchover(db *v1alpha1.Database, d time.Duration) {
	promotionSeconds.WithLabelValues(db.Namespace, db.Name, "switchover").Observe(d.Seconds())
}
