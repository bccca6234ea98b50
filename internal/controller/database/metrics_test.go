package database

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
)

// exported counts what c exports.
func exported(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// A Database's counters exist from its first reconcile, and go with it.
func TestMetricsLiveAndDieWithTheDatabase(t *testing.T) {
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "metrics-test", Namespace: "shop"}}
	before, beforeFailovers := exported(ha.Switchovers), exported(ha.Failovers)
	initMetrics(db)
	if got := exported(ha.Switchovers) - before; got != 3 {
		t.Errorf("switchover series after initMetrics: %d new, want one per result (3)", got)
	}
	if got := exported(ha.Failovers) - beforeFailovers; got != 1 {
		t.Errorf("failover series after initMetrics: %d new, want 1", got)
	}
	forgetMetrics(client.ObjectKeyFromObject(db))
	if got, got2 := exported(ha.Switchovers), exported(ha.Failovers); got != before || got2 != beforeFailovers {
		t.Errorf("series after forgetMetrics: %d switchover, %d failover; want %d, %d", got, got2, before, beforeFailovers)
	}
}
