package database

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

var (
	walPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_database_wal_archive_pending_files", Help: "WAL files the primary finished and has not archived yet.",
	}, []string{"namespace", "database"})
	instances = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_database_instances", Help: "Instances the Database runs (status.instances).",
	}, []string{"namespace", "database"})
	readyInstances = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_database_ready_instances", Help: "Instances of the Database that are ready (status.readyInstances): one whose pod or node is gone counts as not ready.",
	}, []string{"namespace", "database"})
	walLastArchived = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "daytwo_database_wal_last_archived_timestamp_seconds", Help: "When the primary last archived a WAL file: time() minus it is the archive's age.",
	}, []string{"namespace", "database"})
	instanceAPICalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daytwo_instance_api_requests_total", Help: "Calls of the instance managers' API (status polls, promotions...), by method and whether an answer came.",
	}, []string{"method", "result"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(ha.Failovers, ha.Switchovers, ha.PromotionSeconds, walPending, walLastArchived, instances, readyInstances, instanceAPICalls)
	})
}

// initMetrics makes db's counters exist at 0 before their first event, so
// that increase() sees the first failover (a series born at 1 shows no
// increase) and the dashboard finds them.
func initMetrics(db *v1alpha1.Database) {
	ha.Failovers.WithLabelValues(db.Namespace, db.Name)
	for _, r := range []v1alpha1.SwitchoverResult{v1alpha1.SwitchoverSucceeded, v1alpha1.SwitchoverRefused, v1alpha1.SwitchoverFailed} {
		ha.Switchovers.WithLabelValues(db.Namespace, db.Name, string(r))
	}
	for _, kind := range []string{"failover", "switchover"} {
		ha.PromotionSeconds.WithLabelValues(db.Namespace, db.Name, kind)
	}
	controller.InitCounts("Database", db, "restart-broken-instance")
}

// forgetMetrics drops the series of a Database that is gone.
func forgetMetrics(key client.ObjectKey) {
	controller.ForgetSeries(prometheus.Labels{"namespace": key.Namespace, "database": key.Name},
		ha.Failovers, ha.Switchovers, ha.PromotionSeconds, walPending, walLastArchived, instances, readyInstances)
	controller.ForgetCounts("Database", key)
}

// recordInstanceMetrics publishes how many instances run and are ready,
// as the status says: what an alert needs when an instance, its pod or its
// node is gone and no instance manager is left to scrape.
func recordInstanceMetrics(db *v1alpha1.Database) {
	instances.WithLabelValues(db.Namespace, db.Name).Set(float64(db.Status.Instances))
	readyInstances.WithLabelValues(db.Namespace, db.Name).Set(float64(db.Status.ReadyInstances))
}

// countInstanceAPICall counts one call of an instance's API.
func countInstanceAPICall(method string, err error) {
	result := "answered"
	if err != nil {
		result = "unanswered"
	}
	instanceAPICalls.WithLabelValues(method, result).Inc()
}
