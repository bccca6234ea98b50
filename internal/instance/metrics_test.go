package instance_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads the instance's /metrics: every sample by name, labels
// rendered "k=v,..." (sorted, as the exposition format gives them).
type scrape map[string]map[string]float64

func (in *instance) scrape() (scrape, error) {
	c := http.Client{Timeout: 15 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", in.metricsPort))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := scrape{}
	for name, f := range families {
		out[name] = map[string]float64{}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[name][strings.Join(labels, ",")] = value(m)
		}
	}
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// get is one sample, failing the test when it is missing.
func (s scrape) get(t *testing.T, name, labels string) float64 {
	t.Helper()
	v, ok := s[name][labels]
	if !ok {
		t.Fatalf("no sample %s{%s}; the family has %v", name, labels, s[name])
	}
	return v
}

// A primary and its replica serve their PostgreSQL's figures: the ones
// the alerts and the dashboard read, each with a value that can be wrong.
func TestMetricsOfAPrimaryAndItsReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	prim, repl, _ := lt.linkedPair()

	// An open transaction holding a lock, and a session waiting for it.
	holder, err := prim.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Close(ctx) }()
	if _, err := holder.Exec(ctx, "BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waiter, err := prim.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = waiter.Close(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { _, _ = waiter.Exec(wctx, "SELECT count(*) FROM items") }()
	prim.exec(ctx, "BEGIN; CREATE TEMP TABLE gone (x int); ROLLBACK")
	prim.superuser("CHECKPOINT")

	var s scrape
	eventually(t, 20*time.Second, func() bool {
		s, err = prim.scrape()
		return err == nil && s["daytwo_postgres_locks_waiting"][""] >= 1 && s["daytwo_postgres_oldest_transaction_seconds"][""] >= 1
	}, "the primary's figures to show the waiting lock and the open transaction")
	for name, want := range map[string]float64{"daytwo_postgres_up": 1, "daytwo_instance_primary": 1, "daytwo_postgres_pending_restart": 0} {
		if got := s.get(t, name, ""); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if len(s["daytwo_postgres_info"]) != 1 {
		t.Errorf("daytwo_postgres_info: %v, want one sample", s["daytwo_postgres_info"])
	}
	for labels := range s["daytwo_postgres_info"] {
		if !strings.Contains(labels, "role=primary") || !strings.Contains(labels, "server_version=") {
			t.Errorf("daytwo_postgres_info{%s}: want role=primary and the server version", labels)
		}
	}
	if got := s.get(t, "daytwo_postgres_backends", "datname=orders,state=idle in transaction"); got < 1 {
		t.Errorf("idle in transaction backends on orders = %v, want at least 1", got)
	}
	if got := s.get(t, "daytwo_postgres_backends", "datname=orders,state=active"); got < 1 {
		t.Errorf("active backends on orders = %v, want the waiting one", got)
	}
	if got := s.get(t, "daytwo_postgres_database_size_bytes", "datname=orders"); got < 1<<20 {
		t.Errorf("orders is %v bytes, want over 1 MiB", got)
	}
	if got := s.get(t, "daytwo_postgres_xact_commit_total", "datname=orders"); got < 2 {
		t.Errorf("commits on orders = %v, want the table's creation and rows", got)
	}
	if got := s.get(t, "daytwo_postgres_xact_rollback_total", "datname=orders"); got < 1 {
		t.Errorf("rollbacks on orders = %v, want the failed insert", got)
	}
	s.get(t, "daytwo_postgres_deadlocks_total", "datname=orders")
	s.get(t, "daytwo_postgres_temp_bytes_total", "datname=orders")
	if _, ok := s["daytwo_postgres_database_size_bytes"]["datname=template0"]; ok {
		t.Error("template0 is reported")
	}
	if got := s.get(t, "daytwo_postgres_replication_synchronous", "replica=orders-1"); got != 0 {
		t.Errorf("orders-1 counts as synchronous: %v", got)
	}
	if got := s.get(t, "daytwo_postgres_replication_lag_bytes", "replica=orders-1"); got < 0 || got > 16<<20 {
		t.Errorf("orders-1's lag = %v bytes, want a streaming replica's", got)
	}
	s.get(t, "daytwo_postgres_replication_lag_seconds", "replica=orders-1")
	if got := s.get(t, "daytwo_postgres_replication_slot_active", "slot=daytwo_orders_1"); got != 1 {
		t.Errorf("orders-1's slot active = %v, want 1", got)
	}
	s.get(t, "daytwo_postgres_replication_slot_retained_bytes", "slot=daytwo_orders_1")
	for _, name := range []string{"daytwo_postgres_checkpoints_timed_total", "daytwo_postgres_checkpoints_requested_total",
		"daytwo_postgres_checkpoint_write_seconds_total", "daytwo_postgres_checkpoint_buffers_written_total",
		"daytwo_postgres_bgwriter_buffers_clean_total", "daytwo_postgres_buffers_allocated_total"} {
		s.get(t, name, "")
	}
	if got := s.get(t, "daytwo_postgres_checkpoints_requested_total", ""); got < 1 {
		t.Errorf("requested checkpoints = %v, want the CHECKPOINT's", got)
	}
	if size, free := s.get(t, "daytwo_volume_size_bytes", "volume=data"), s.get(t, "daytwo_volume_available_bytes", "volume=data"); size <= 0 || free <= 0 || free > size {
		t.Errorf("volume size %v, available %v", size, free)
	}
	if errs := s["daytwo_postgres_query_errors_total"]; len(errs) != 0 {
		t.Errorf("query errors: %v", errs)
	}
	if _, ok := s["process_resident_memory_bytes"]; !ok {
		t.Error("no process figures for the instance manager")
	}

	r, err := repl.scrape()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"daytwo_postgres_up": 1, "daytwo_instance_primary": 0, "daytwo_postgres_wal_receiver_streaming": 1} {
		if got := r.get(t, name, ""); got != want {
			t.Errorf("replica %s = %v, want %v", name, got, want)
		}
	}
	r.get(t, "daytwo_postgres_replay_lag_seconds", "")
	if _, ok := r["daytwo_postgres_replication_lag_bytes"]; ok {
		t.Error("the replica reports replicas of its own")
	}
	for labels := range r["daytwo_postgres_info"] {
		if !strings.Contains(labels, "role=replica") {
			t.Errorf("the replica's daytwo_postgres_info{%s}", labels)
		}
	}
}
