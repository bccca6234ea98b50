//go:build e2e

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// Prometheus is a real Prometheus (built from its Go module by
// hack/build-addons.sh) run on the host of the real node. It discovers the
// pods through the API server and scrapes them as config/monitoring's
// PodMonitors say, and evaluates config/monitoring's rules.
type Prometheus struct {
	URL string
	cmd *exec.Cmd
	dir string
	log *testpg.SyncBuffer
}

// PodMonitor is the part of a monitoring.coreos.com/v1 PodMonitor that
// StartPrometheus turns into a scrape job, as the Prometheus Operator would.
type PodMonitor struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels      map[string]string `json:"matchLabels"`
			MatchExpressions []struct {
				Key      string `json:"key"`
				Operator string `json:"operator"`
			} `json:"matchExpressions"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Scheme      string `json:"scheme"`
			HonorLabels bool   `json:"honorLabels"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// PrometheusRule is the part of a PrometheusRule the rule file takes.
type PrometheusRule struct {
	Spec struct {
		Groups []RuleGroup `json:"groups"`
	} `json:"spec"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ReadYAML reads a YAML file of the repository into v.
func ReadYAML(rel string, v any) error {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), rel))
	if err != nil {
		return err
	}
	return yaml.Unmarshal(b, v)
}

// sanitize is how Prometheus names a pod label in its discovery labels.
func sanitize(label string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, label)
}

// scrapeJob is the scrape configuration of a PodMonitor: the pods its
// selector picks, the port it names, its relabelings, and the namespace
// and pod labels the Prometheus Operator adds.
func scrapeJob(pm PodMonitor, kubeconfig, tokenFile string, scrape time.Duration) (map[string]any, error) {
	if len(pm.Spec.Endpoints) != 1 {
		return nil, fmt.Errorf("PodMonitor %s: %d endpoints, the e2e takes one", pm.Metadata.Name, len(pm.Spec.Endpoints))
	}
	ep := pm.Spec.Endpoints[0]
	var relabel []map[string]any
	for k, v := range pm.Spec.Selector.MatchLabels {
		relabel = append(relabel, map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_label_" + sanitize(k)}, "regex": v})
	}
	for _, e := range pm.Spec.Selector.MatchExpressions {
		if e.Operator != "Exists" {
			return nil, fmt.Errorf("PodMonitor %s: operator %s is not translated", pm.Metadata.Name, e.Operator)
		}
		relabel = append(relabel, map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_labelpresent_" + sanitize(e.Key)}, "regex": "true"})
	}
	relabel = append(relabel,
		map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_container_port_name"}, "regex": ep.Port},
		map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "Succeeded|Failed"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
	)
	for _, r := range ep.Relabelings {
		relabel = append(relabel, map[string]any{"source_labels": r.SourceLabels, "target_label": r.TargetLabel})
	}
	job := map[string]any{
		"job_name":              pm.Metadata.Name,
		"scrape_interval":       scrape.String(),
		"scrape_timeout":        scrape.String(),
		"metrics_path":          ep.Path,
		"honor_labels":          ep.HonorLabels,
		"kubernetes_sd_configs": []map[string]any{{"role": "pod", "kubeconfig_file": kubeconfig}},
		"relabel_configs":       relabel,
	}
	if ep.Scheme == "https" {
		job["scheme"] = "https"
		job["tls_config"] = map[string]any{"insecure_skip_verify": true}
		job["authorization"] = map[string]any{"credentials_file": tokenFile}
	}
	return job, nil
}

// StartPrometheus runs Prometheus with a scrape job per PodMonitor (every
// scrape, which is also the scrape timeout) and the rule groups (evaluated
// every evaluate). token is a bearer token allowed to get the operator's
// /metrics.
func StartPrometheus(binary, kubeconfig, token string, monitors []PodMonitor, groups []RuleGroup, scrape, evaluate time.Duration) (*Prometheus, error) {
	dir, err := os.MkdirTemp("", "daytwo-e2e-prometheus-")
	if err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, err
	}
	var jobs []map[string]any
	for _, pm := range monitors {
		job, err := scrapeJob(pm, kubeconfig, tokenFile, scrape)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, job)
	}
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		return nil, err
	}
	config, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": scrape.String(), "evaluation_interval": evaluate.String()},
		"rule_files":     []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": jobs,
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yaml"), config, 0o600); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := &Prometheus{URL: "http://" + addr, dir: dir, log: &testpg.SyncBuffer{}}
	p.cmd = exec.Command(binary, "--config.file="+filepath.Join(dir, "prometheus.yaml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1d")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("prometheus not ready after 30s: %v\n%s", err, p.log.String()) //nolint:errorlint // err is nil after an answer that was not 200
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops Prometheus and removes its data.
func (p *Prometheus) Stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	_ = os.RemoveAll(p.dir)
}

// Log is Prometheus's own log.
func (p *Prometheus) Log() string { return p.log.String() }

// api calls GET /api/v1/<path> and decodes its data into out.
func (p *Prometheus) api(ctx context.Context, path string, params url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/"+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// Sample is one element of an instant vector.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query evaluates an instant query now.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	var out struct {
		ResultType string   `json:"resultType"`
		Result     []Sample `json:"result"`
	}
	if err := p.api(ctx, "query", url.Values{"query": {expr}}, &out); err != nil {
		return nil, err
	}
	if out.ResultType != "vector" {
		return nil, fmt.Errorf("query %q gave a %s", expr, out.ResultType)
	}
	return out.Result, nil
}

// Alert is an alert as /api/v1/alerts lists it.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// Alerts lists the pending and firing alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var out struct {
		Alerts []Alert `json:"alerts"`
	}
	return out.Alerts, p.api(ctx, "alerts", nil, &out)
}

// Firing says whether an alert of that name fires with every label of
// match.
func (p *Prometheus) Firing(ctx context.Context, name string, match map[string]string) (bool, error) {
	alerts, err := p.Alerts(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(alerts, func(a Alert) bool {
		if a.State != "firing" || a.Labels["alertname"] != name {
			return false
		}
		for k, v := range match {
			if a.Labels[k] != v {
				return false
			}
		}
		return true
	}), nil
}

// MetricNames parses expr with Prometheus's own parser (/api/v1/parse_query)
// and returns the metric names its selectors read.
func (p *Prometheus) MetricNames(ctx context.Context, expr string) ([]string, error) {
	var ast any
	if err := p.api(ctx, "parse_query", url.Values{"query": {expr}}, &ast); err != nil {
		return nil, err
	}
	var names []string
	var walk func(any)
	walk = func(n any) {
		switch n := n.(type) {
		case map[string]any:
			// A range (rate(x[5m])) is a matrixSelector node carrying the
			// name itself.
			if n["type"] == "vectorSelector" || n["type"] == "matrixSelector" {
				if name, ok := n["name"].(string); ok && name != "" && !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
			for _, v := range n {
				walk(v)
			}
		case []any:
			for _, v := range n {
				walk(v)
			}
		}
	}
	walk(ast)
	return names, nil
}

// NamesSince lists every metric name Prometheus holds samples of since.
func (p *Prometheus) NamesSince(ctx context.Context, since time.Time) ([]string, error) {
	var names []string
	err := p.api(ctx, "label/__name__/values", url.Values{"start": {fmt.Sprint(since.Unix())}, "end": {fmt.Sprint(time.Now().Unix())}}, &names)
	return names, err
}
