package ha

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// The Actor's metrics; the Database controller registers them, makes a
// Database's series and forgets them with its own.
var (
	Failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_database_failovers_total", Help: "Failovers: the primary lease moved to a replica after the primary lost it.",
	}, []string{"namespace", "database"})
	Switchovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_database_switchovers_total", Help: "Switchover requests answered, by result.",
	}, []string{"namespace", "database", "result"})
	PromotionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "daytwo_database_promotion_seconds",
		Help:    "From a failover's detection, or a switchover's start, to the new primary's promotion.",
		Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 30, 60},
	}, []string{"namespace", "database", "kind"})
)

func countFailover(db *v1alpha1.Database) { Failovers.WithLabelValues(db.Namespace, db.Name).Inc() }

func observeFailover(db *v1alpha1.Database, d time.Duration) {
	PromotionSeconds.WithLabelValues(db.Namespace, db.Name, "failover").Observe(d.Seconds())
}

func countSwitchover(db *v1alpha1.Database, result v1alpha1.SwitchoverResult) {
	Switchovers.WithLabelValues(db.Namespace, db.Name, string(result)).Inc()
}

func observeSwitchover(db *v1alpha1.Database, d time.Duration) {
	PromotionSeconds.WithLabelValues(db.Namespace, db.Name, "switchover").Observe(d.Seconds())
}
