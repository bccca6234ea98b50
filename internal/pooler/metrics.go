package pooler

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The manager serves /metrics over plain HTTP, as the instance manager
// does: PgBouncer's SHOW POOLS, SHOW STATS and SHOW STATE, read on the
// console at each scrape within scrapeTimeout.
const scrapeTimeout = 3 * time.Second

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("daytwo_pooler_"+name, help, labels, nil)
}

var (
	descUp     = desc("up", "1 when PgBouncer answered this scrape on its console in time, else 0.")
	descPaused = desc("paused", "1 while PgBouncer is paused (a switchover).")
	// SHOW POOLS, per database and user.
	poolGauges = []struct {
		column string
		desc   *prometheus.Desc
	}{
		{"cl_active", desc("clients_active", "Client connections linked to a server connection or idle.", "database", "user")},
		{"cl_waiting", desc("clients_waiting", "Client connections waiting for a server connection.", "database", "user")},
		{"sv_active", desc("servers_active", "Server connections linked to a client.", "database", "user")},
		{"sv_idle", desc("servers_idle", "Server connections idle and ready for a client.", "database", "user")},
		{"sv_used", desc("servers_used", "Server connections idle longer than server_check_delay, to be checked before use.", "database", "user")},
		{"sv_login", desc("servers_login", "Server connections logging in.", "database", "user")},
	}
	descMaxWait = desc("clients_max_wait_seconds", "How long the oldest waiting client has waited.", "database", "user")
	// SHOW STATS, per database.
	statCounters = []struct {
		column string
		scale  float64
		desc   *prometheus.Desc
	}{
		{"total_xact_count", 1, desc("transactions_total", "Transactions pooled.", "database")},
		{"total_query_count", 1, desc("queries_total", "Queries pooled.", "database")},
		{"total_wait_time", 1e-6, desc("client_wait_seconds_total", "Time clients waited for a server connection.", "database")},
		{"total_xact_time", 1e-6, desc("transaction_seconds_total", "Time spent in transactions, idle in transaction included.", "database")},
		{"total_received", 1, desc("received_bytes_total", "Bytes received from clients.", "database")},
		{"total_sent", 1, desc("sent_bytes_total", "Bytes sent to clients.", "database")},
	}
)

// collector reads PgBouncer's figures at each scrape.
type collector struct{ m *Manager }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	ch <- descPaused
	ch <- descMaxWait
	for _, g := range poolGauges {
		ch <- g.desc
	}
	for _, s := range statCounters {
		ch <- s.desc
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	pools, perr := c.m.show(ctx, "SHOW POOLS")
	stats, serr := c.m.show(ctx, "SHOW STATS")
	state, sterr := c.m.show(ctx, "SHOW STATE")
	up := 1.0
	if perr != nil || serr != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	if sterr == nil {
		for _, row := range state {
			if row["key"] == "paused" {
				ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, boolValue(row["value"]))
			}
		}
	}
	for _, row := range pools {
		db, user := row["database"], row["user"]
		if db == "pgbouncer" {
			continue // the console
		}
		for _, g := range poolGauges {
			if v, ok := number(row[g.column]); ok {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, db, user)
			}
		}
		s, sok := number(row["maxwait"])
		us, uok := number(row["maxwait_us"])
		if sok && uok {
			ch <- prometheus.MustNewConstMetric(descMaxWait, prometheus.GaugeValue, s+us/1e6, db, user)
		}
	}
	for _, row := range stats {
		if row["database"] == "pgbouncer" {
			continue
		}
		for _, s := range statCounters {
			if v, ok := number(row[s.column]); ok {
				ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, v*s.scale, row["database"])
			}
		}
	}
}

// show runs a console SHOW and returns its rows, column name to text.
func (m *Manager) show(ctx context.Context, what string) ([]map[string]string, error) {
	conn, err := m.consoleConn(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, what)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		row := map[string]string{}
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = string(rows.RawValues()[i])
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

func number(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

func boolValue(s string) float64 {
	if s == "yes" || s == "true" || s == "1" {
		return 1
	}
	return 0
}

// metricsHandler serves PgBouncer's figures and the manager's own.
func (m *Manager) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{m: m}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 2 * scrapeTimeout, ErrorHandling: promhttp.ContinueOnError}))
	return mux
}
