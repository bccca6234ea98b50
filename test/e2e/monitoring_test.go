//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/argocd"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// prometheus runs for the whole real-node run (DAYTWO_PROMETHEUS names
// its binary), scraping as config/monitoring says and evaluating its rules;
// nil otherwise.
var (
	prometheus      *framework.Prometheus
	prometheusStart time.Time
)

// alertFor is the "for" every rule gets in the e2e: the expressions, the
// thresholds and the labels are config/monitoring's own, only the time an
// alert must hold before it fires is cut, so the faults stay short.
const alertFor = "4s"

const operatorNamespace = "daytwo-system"

// monitoringRules reads config/monitoring/prometheusrule.yaml.
func monitoringRules() ([]framework.RuleGroup, error) {
	var pr framework.PrometheusRule
	if err := framework.ReadYAML("config/monitoring/prometheusrule.yaml", &pr); err != nil {
		return nil, err
	}
	return pr.Spec.Groups, nil
}

// startPrometheus starts the run's Prometheus, with a token of a
// ServiceAccount bound to daytwo-metrics-reader, as a user would set it up.
func startPrometheus(ctx context.Context) error {
	binary := os.Getenv("DAYTWO_PROMETHEUS")
	if binary == "" || cluster.Mode != framework.ModeReal {
		return nil
	}
	groups, err := monitoringRules()
	if err != nil {
		return err
	}
	for g := range groups {
		for r := range groups[g].Rules {
			groups[g].Rules[r].For = alertFor
		}
	}
	var monitors []framework.PodMonitor
	for _, f := range []string{"podmonitor-instances.yaml", "podmonitor-operator.yaml", "podmonitor-pooler.yaml"} {
		var pm framework.PodMonitor
		if err := framework.ReadYAML("config/monitoring/"+f, &pm); err != nil {
			return err
		}
		monitors = append(monitors, pm)
	}
	const sa = "e2e-prometheus"
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: operatorNamespace}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "daytwo-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: operatorNamespace}}},
	} {
		if err := cluster.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	tr, err := cluster.Kube.CoreV1().ServiceAccounts(operatorNamespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	prometheusStart = time.Now()
	// Scrapes every 5 s with a 5 s timeout (the instance manager answers
	// within 3 s even when its server hangs); rules every 2 s.
	prometheus, err = framework.StartPrometheus(binary, os.Getenv("KUBECONFIG"), tr.Status.Token, monitors, groups, 5*time.Second, 2*time.Second)
	if err == nil {
		fmt.Println("e2e: Prometheus at", prometheus.URL, "scrapes as config/monitoring says")
	}
	return err
}

func requirePrometheus(t *testing.T) {
	t.Helper()
	requireRealNode(t)
	if prometheus == nil {
		t.Fatal("no Prometheus: make test-e2e builds it (hack/build-addons.sh prometheus) and sets DAYTWO_PROMETHEUS")
	}
}

// The rules and the dashboard, read by Prometheus's own tools: promtool
// checks the rule file (every expression parses, every template renders),
// and every dashboard query parses.
func TestMonitoringRulesAndDashboardParse(t *testing.T) {
	t.Parallel()
	requirePrometheus(t)
	groups, err := monitoringRules()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(os.Getenv("DAYTWO_PROMTOOL"), "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("promtool: %s", strings.TrimSpace(string(out)))
	// The name reader finds names in ranges and selectors alike: the
	// full run's metric check depends on it.
	names, err := prometheus.MetricNames(context.Background(), `sum(rate(a_total{x="1"}[5m])) / on (x) b and increase(c[1h]) > 0`)
	if slices.Sort(names); err != nil || !slices.Equal(names, []string{"a_total", "b", "c"}) {
		t.Fatalf("metric names %v (%v), want a_total, b, c", names, err)
	}
	queries, err := dashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		if _, err := prometheus.MetricNames(context.Background(), q); err != nil {
			t.Errorf("dashboard query %q: %v", q, err)
		}
	}
}

// dashboardQueries lists every query of config/monitoring's dashboard,
// its template variables' included.
func dashboardQueries() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config/monitoring/grafana-dashboard.json"))
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		return nil, err
	}
	var qs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		// label_values(<selector>, label) reads <selector>.
		if v.Type == "query" && strings.HasPrefix(v.Query, "label_values(") {
			inner := strings.TrimSuffix(strings.TrimPrefix(v.Query, "label_values("), ")")
			qs = append(qs, inner[:strings.LastIndex(inner, ",")])
		}
	}
	if len(qs) < 10 {
		return nil, fmt.Errorf("the dashboard has %d queries", len(qs))
	}
	return qs, nil
}

// checkMetricsExist, after a full run, asks Prometheus for every metric
// any alert or dashboard query reads: each must have been scraped from
// daytwo during the run.
func checkMetricsExist(ctx context.Context) (string, error) {
	groups, err := monitoringRules()
	if err != nil {
		return "", err
	}
	exprs := map[string]string{}
	for _, g := range groups {
		for _, r := range g.Rules {
			exprs[r.Expr] = "alert " + r.Alert
		}
	}
	queries, err := dashboardQueries()
	if err != nil {
		return "", err
	}
	for _, q := range queries {
		exprs[q] = "the dashboard"
	}
	seen, err := prometheus.NamesSince(ctx, prometheusStart)
	if err != nil {
		return "", err
	}
	var missing []string
	read := map[string]bool{}
	for expr, where := range exprs {
		names, err := prometheus.MetricNames(ctx, expr)
		if err != nil {
			return "", fmt.Errorf("%s: %q: %w", where, expr, err)
		}
		for _, n := range names {
			read[n] = true
			if !slices.Contains(seen, n) {
				missing = append(missing, fmt.Sprintf("%s (read by %s)", n, where))
			}
		}
	}
	slices.Sort(missing)
	summary := fmt.Sprintf("%d expressions read %d metrics; Prometheus saw %d names", len(exprs), len(read), len(seen))
	if len(missing) > 0 {
		return summary, fmt.Errorf("never scraped: %s", strings.Join(slices.Compact(missing), "; "))
	}
	return summary, nil
}

// waitAlert waits until the alert fires (or, with firing false, is
// gone) with the labels of match.
func waitAlert(t *testing.T, timeout time.Duration, name string, match map[string]string, firing bool) time.Duration {
	t.Helper()
	start := time.Now()
	what := fmt.Sprintf("alert %s%v firing", name, match)
	if !firing {
		what = fmt.Sprintf("alert %s%v resolved", name, match)
	}
	framework.Eventually(t, timeout, what, func(ctx context.Context) (bool, error) {
		on, err := prometheus.Firing(ctx, name, match)
		return err == nil && on == firing, nil
	})
	return time.Since(start)
}

// The alerts a DBA relies on most, against the real thing: a replica
// whose server hangs fires DaytwoInstanceDown, and while it hangs the
// primary's writes make DaytwoReplicationLagHigh fire; both resolve when it
// runs again. A backup to a bucket with wrong credentials fires
// DaytwoBackupFailing, which resolves with the next good run. One Database
// of two instances serves both, and then every command of the kubectl
// plugin (plugin_test.go).
func TestAlertsFireAndResolve(t *testing.T) {
	t.Parallel()
	requirePrometheus(t)
	ctx := context.Background()
	ns := restrictedNamespace(t)
	cluster.ReserveCPU(t, ns, 550)
	minioInCluster(t, ns)
	createDatabase(t, ns, "watched", func(db *v1alpha1.Database) { db.Spec.Instances = ptr.To[int32](2) })
	db := waitDatabase(t, ns, "watched", 3*time.Minute, "Ready", isReady(2, ""))
	replica := "watched-0"
	if db.Status.Primary == replica {
		replica = "watched-1"
	}
	framework.Eventually(t, time.Minute, "both instances scraped and up", func(ctx context.Context) (bool, error) {
		s, err := prometheus.Query(ctx, fmt.Sprintf(`daytwo_postgres_up{namespace=%q, database="watched"} == 1`, ns))
		return err == nil && len(s) == 2, nil
	})

	// A backup that cannot write: wrong credentials.
	wrong := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-wrong", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "e2e-user", "AWS_SECRET_ACCESS_KEY": "not-the-password"}}
	if err := cluster.Client.Create(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	backup := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns,
		Annotations: map[string]string{v1alpha1.AnnotationBackupRequested: time.Now().UTC().Format(time.RFC3339)}},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "watched"}, Schedule: "0 3 * * *",
			Method: v1alpha1.BackupMethodLogical,
			Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: fmt.Sprintf("minio.%s.svc.cluster.local:9000", ns),
				Bucket: "alerts", Insecure: true, CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3-wrong"}}}}}
	if err := cluster.Client.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}

	// The replica's PostgreSQL hangs; its instance manager still answers.
	resume := cluster.StopProcesses(t, ns, replica, "postgres", "postgres")
	t.Cleanup(resume)
	psqlPod(t, ns, "psql", "watched")
	sql(t, ns, "psql", "watched-rw", "CREATE TABLE ballast AS SELECT g, repeat(md5(g::text), 32) AS pad FROM generate_series(1, 300000) g")
	waitArgoHealth(t, &v1alpha1.Database{}, ns, "watched", "Degraded")
	took := waitAlert(t, 2*time.Minute, "DaytwoInstanceDown", map[string]string{"namespace": ns, "pod": replica}, true)
	t.Logf("DaytwoInstanceDown fired for %s %s after the table was written", replica, took.Round(100*time.Millisecond))
	took = waitAlert(t, 2*time.Minute, "DaytwoReplicationLagHigh", map[string]string{"namespace": ns, "replica": replica}, true)
	t.Logf("DaytwoReplicationLagHigh fired for %s after %s more", replica, took.Round(100*time.Millisecond))
	took = waitAlert(t, 3*time.Minute, "DaytwoBackupFailing", map[string]string{"namespace": ns, "backup": "nightly", "database": "watched"}, true)
	t.Logf("DaytwoBackupFailing fired after %s more", took.Round(100*time.Millisecond))
	waitArgoHealth(t, &v1alpha1.DatabaseBackup{}, ns, "nightly", "Degraded")

	resume()
	took = waitAlert(t, 2*time.Minute, "DaytwoInstanceDown", map[string]string{"namespace": ns, "pod": replica}, false)
	t.Logf("DaytwoInstanceDown resolved %s after the replica resumed", took.Round(100*time.Millisecond))
	took = waitAlert(t, 3*time.Minute, "DaytwoReplicationLagHigh", map[string]string{"namespace": ns, "replica": replica}, false)
	t.Logf("DaytwoReplicationLagHigh resolved after %s more", took.Round(100*time.Millisecond))
	waitArgoHealth(t, &v1alpha1.Database{}, ns, "watched", "Healthy")

	// The right credentials, and another run: the alert resolves.
	good := &corev1.Secret{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3"}, good); err != nil {
		t.Fatal(err)
	}
	wrong.Data, wrong.StringData = good.Data, nil
	if err := cluster.Client.Update(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	// The run is asked for with Argo CD's resource action, as Argo CD
	// runs and applies it.
	runArgoAction(t, backup, "DatabaseBackup", "backup-now")
	waitBackup(t, ns, "nightly", 3*time.Minute, "a good run", func(b *v1alpha1.DatabaseBackup) bool {
		return meta.IsStatusConditionFalse(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
	})
	took = waitAlert(t, time.Minute, "DaytwoBackupFailing", map[string]string{"namespace": ns, "backup": "nightly"}, false)
	t.Logf("DaytwoBackupFailing resolved %s after the good run", took.Round(100*time.Millisecond))
	waitArgoHealth(t, &v1alpha1.DatabaseBackup{}, ns, "nightly", "Healthy")

	// The same Database and backup serve the kubectl plugin's commands.
	checkPlugin(t, ns, "watched", "nightly")
}

// runArgoAction runs kind's Argo CD resource action (config/argocd's
// argocd-cm.yaml, by gopher-lua as Argo CD runs it) on the live obj and
// applies what it returns as Argo CD does: a merge patch from the live
// object to the returned one.
func runArgoAction(t *testing.T, obj client.Object, kind, action string) {
	t.Helper()
	ctx := t.Context()
	cm, err := argocd.LoadConfigMap(filepath.Join(framework.RepoRoot(), "config/argocd/argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	actions, err := cm.Actions(kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	out, err := argocd.Run(actions.Script(action), obj)
	if err != nil {
		t.Fatalf("Argo CD action %s of %s: %v", action, kind, err)
	}
	live, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.CreateMergePatch(live, changed)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("Argo CD action %s of %s: %s: %v", action, kind, patch, err)
	}
	t.Logf("Argo CD action %s of %s %s: %s", action, kind, obj.GetName(), patch)
}

// waitArgoHealth waits until Argo CD's health check (config/argocd/health.lua,
// run by gopher-lua as Argo CD runs it) says want of the live object.
func waitArgoHealth(t *testing.T, obj client.Object, ns, name, want string) {
	t.Helper()
	script, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config/argocd/health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	var last argocd.Health
	framework.Eventually(t, time.Minute, fmt.Sprintf("Argo CD health %s of %s", want, name), func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return false, err
		}
		last, err = argocd.Evaluate(string(script), obj)
		if err != nil {
			return false, err
		}
		return last.Status == want, nil
	})
	t.Logf("Argo CD health of %s: %s (%s)", name, last.Status, last.Message)
}
