// Package chart tests charts/daytwo with the real Helm (built from its Go
// module by hack/build-addons.sh, `make deps`) against config/ rendered by
// kubectl's kustomize: the two installs must be the same install.
package chart_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/daytwo-dev/daytwo/internal/testenv"
)

func cache() string {
	if c := os.Getenv("DAYTWO_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "daytwo")
}

// tool is a binary of the tools cache; its absence fails the test.
func tool(t *testing.T, path, how string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (%v): %s", path, err, how)
	}
	return path
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool(t, filepath.Join(cache(), "addons", "helm"), "make deps builds it"), args...)
	cmd.Dir = testenv.RepoRoot()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

func kustomize(t *testing.T, dir string) string {
	t.Helper()
	kubectl := tool(t, filepath.Join(cache(), "k8s-v1.36.3", "kubectl"), "make tools builds it")
	cmd := exec.Command(kubectl, "kustomize", filepath.Join(testenv.RepoRoot(), dir))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return string(out)
}

// objects indexes the documents of a rendering by kind/namespace/name.
func objects(t *testing.T, rendered string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(rendered)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if obj == nil {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = obj
	}
	return out
}

func keys(m map[string]map[string]any) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// The chart at its defaults installs what config/default installs: the same
// CRDs, Deployment, Services, webhook and RBAC, object for object (the
// daytwo-system Namespace aside: Helm installs into a namespace that
// exists, or makes it with --create-namespace).
func TestChartRendersConfigDefault(t *testing.T) {
	if _, err := helm(t, "lint", "--strict", "charts/daytwo"); err != nil {
		t.Fatal(err)
	}
	rendered, err := helm(t, "template", "daytwo", "charts/daytwo", "--namespace", "daytwo-system")
	if err != nil {
		t.Fatal(err)
	}
	chart := objects(t, rendered)
	kust := objects(t, kustomize(t, "config/default"))
	delete(kust, "Namespace//daytwo-system")
	// The CRDs are templates, so helm upgrade upgrades them, and helm
	// uninstall keeps them (it would delete every Database).
	for key, obj := range chart {
		if !strings.HasPrefix(key, "CustomResourceDefinition/") {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		ann := u.GetAnnotations()
		if ann["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s lacks helm.sh/resource-policy: keep", key)
		}
		delete(ann, "helm.sh/resource-policy")
		u.SetAnnotations(ann)
	}
	if !slices.Equal(keys(chart), keys(kust)) {
		t.Fatalf("the chart renders\n  %s\nconfig/default\n  %s", strings.Join(keys(chart), "\n  "), strings.Join(keys(kust), "\n  "))
	}
	for key, want := range kust {
		if !reflect.DeepEqual(chart[key], want) {
			a, _ := yaml.Marshal(chart[key])
			b, _ := yaml.Marshal(want)
			t.Errorf("%s differs:\nchart:\n%s\nconfig/default:\n%s", key, a, b)
		}
	}
	t.Logf("%d objects, each equal to config/default's", len(kust))
}

// Watching namespaces, the chart holds a Role in each and nothing
// cluster-wide but what config/namespaced keeps, and no webhook.
func TestChartNamespacedMode(t *testing.T) {
	args := []string{"charts/daytwo", "--set", "watchNamespaces={apps-a,apps-b}"}
	if _, err := helm(t, append([]string{"lint", "--strict"}, args...)...); err != nil {
		t.Fatal(err)
	}
	rendered, err := helm(t, append([]string{"template", "daytwo", "--namespace", "daytwo-system"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	chart := objects(t, rendered)
	kust := objects(t, kustomize(t, "config/default"))
	namespaced := objects(t, kustomize(t, "config/namespaced"))
	manager := kust["ClusterRole//daytwo-manager"]
	for _, ns := range []string{"apps-a", "apps-b"} {
		role := chart["Role/"+ns+"/daytwo-manager"]
		if role == nil || !reflect.DeepEqual(role["rules"], manager["rules"]) {
			t.Errorf("Role daytwo-manager in %s: %v, want the ClusterRole's rules", ns, role)
		}
		if chart["RoleBinding/"+ns+"/daytwo-manager"] == nil {
			t.Errorf("no RoleBinding daytwo-manager in %s", ns)
		}
	}
	for _, key := range []string{"ClusterRole//daytwo-manager", "ClusterRoleBinding//daytwo-manager",
		"ValidatingWebhookConfiguration//daytwo-validating-webhook", "Service/daytwo-system/daytwo-webhook"} {
		if chart[key] != nil {
			t.Errorf("the namespaced chart renders %s", key)
		}
	}
	for _, key := range []string{"ClusterRole//daytwo-cluster-read", "ClusterRoleBinding//daytwo-cluster-read"} {
		if !reflect.DeepEqual(chart[key], namespaced[key]) {
			t.Errorf("%s differs from config/namespaced's", key)
		}
	}
	dep := unstructured.Unstructured{Object: chart["Deployment/daytwo-system/daytwo-operator"]}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args2, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"--watch-namespaces=apps-a,apps-b", "--webhook-port=0"} {
		if !slices.Contains(args2, want) {
			t.Errorf("operator args %v lack %s", args2, want)
		}
	}
}

// The monitoring artefacts are config/monitoring's, and bad values are
// refused by the schema, naming the value.
func TestChartMonitoringAndSchema(t *testing.T) {
	rendered, err := helm(t, "template", "daytwo", "charts/daytwo", "--namespace", "daytwo-system",
		"--set", "monitoring.podMonitors=true", "--set", "monitoring.prometheusRule=true", "--set", "monitoring.dashboard=true")
	if err != nil {
		t.Fatal(err)
	}
	chart := objects(t, rendered)
	kust := objects(t, kustomize(t, "config/monitoring"))
	for key, want := range kust {
		if !reflect.DeepEqual(chart[key], want) {
			t.Errorf("%s differs from config/monitoring's", key)
		}
	}
	dash, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config/monitoring/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := chart["ConfigMap/daytwo-system/daytwo-dashboard"]
	data, _, _ := unstructured.NestedString(cm, "data", "daytwo.json")
	if strings.TrimSpace(data) != strings.TrimSpace(string(dash)) {
		t.Error("the dashboard ConfigMap does not hold config/monitoring/grafana-dashboard.json")
	}
	// Plain HTTP metrics are scraped over HTTP, and labels reach the
	// objects a Prometheus selects.
	rendered, err = helm(t, "template", "daytwo", "charts/daytwo", "--namespace", "other", "--set", "metrics.secure=false",
		"--set", "monitoring.podMonitors=true", "--set", "monitoring.prometheusRule=true", "--set", "monitoring.labels.release=kps")
	if err != nil {
		t.Fatal(err)
	}
	chart = objects(t, rendered)
	op := chart["PodMonitor/other/daytwo-operator"]
	eps, _, _ := unstructured.NestedSlice(op, "spec", "podMetricsEndpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "http" || eps[0].(map[string]any)["authorization"] != nil {
		t.Errorf("the operator's PodMonitor with metrics.secure=false: %v", eps)
	}
	for _, key := range []string{"PodMonitor/other/daytwo-operator", "PodMonitor/other/daytwo-instances", "PodMonitor/other/daytwo-pooler", "PrometheusRule/other/daytwo"} {
		if l, _, _ := unstructured.NestedString(chart[key], "metadata", "labels", "release"); l != "kps" {
			t.Errorf("%s lacks the label release=kps", key)
		}
	}
	for value, field := range map[string]string{"logLevel=loud": "logLevel", "image.repository=": "repository", "monitoring.podmonitors=true": "podmonitors",
		"watchNamespaces={Apps}": "watchNamespaces", "replicaCount=-1": "replicaCount", "crds.install=true": "install",
		"fullnameOverride=1dt": "fullnameOverride", "logLevel=0": "logLevel", "metrics.port=9443": "port",
		"podLabels.app\\.kubernetes\\.io/component=x": "podLabels"} {
		_, err := helm(t, "template", "daytwo", "charts/daytwo", "--set", value)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("--set %s: %v, want a refusal naming %s", value, err, field)
		}
	}
}

// Two releases get names of their own for everything they make, so two
// namespaced installs can live in one cluster (Helm refuses an object
// another release owns); a release named daytwo gets config/default's
// names. The operator is told its webhook's names, the values reach its
// pod, and the chart works as a subchart (global values).
func TestChartReleasesDoNotShareNames(t *testing.T) {
	render := func(release, ns string, set ...string) map[string]map[string]any {
		args := []string{"template", release, "charts/daytwo", "--namespace", ns}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		rendered, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		return objects(t, rendered)
	}
	a := render("team-a", "team-a", "watchNamespaces={apps-a}", "crds.create=false", "monitoring.podMonitors=true")
	b := render("team-b", "team-b", "watchNamespaces={apps-b}", "crds.create=false", "monitoring.podMonitors=true")
	for key := range a {
		if _, shared := b[key]; shared {
			t.Errorf("both releases render %s", key)
		}
		if strings.HasPrefix(key, "CustomResourceDefinition/") {
			t.Errorf("crds.create=false renders %s", key)
		}
	}
	// The token the operator's PodMonitor scrapes with is the chart's,
	// of a ServiceAccount bound to the metrics reader only.
	pm := a["PodMonitor/team-a/team-a-daytwo-operator"]
	eps, _, _ := unstructured.NestedSlice(pm, "spec", "podMetricsEndpoints")
	secret, _, _ := unstructured.NestedString(eps[0].(map[string]any), "authorization", "credentials", "name")
	tok := unstructured.Unstructured{Object: a["Secret/team-a/"+secret]}
	if tok.Object == nil || tok.GetAnnotations()["kubernetes.io/service-account.name"] != "team-a-daytwo-prometheus" {
		t.Errorf("the operator's PodMonitor reads Secret %q, which the chart does not make for its ServiceAccount", secret)
	}
	if ref, _, _ := unstructured.NestedString(a["ClusterRoleBinding//team-a-daytwo-prometheus"], "roleRef", "name"); ref != "team-a-daytwo-metrics-reader" {
		t.Errorf("the scraping ServiceAccount is bound to %q", ref)
	}

	// With plain-HTTP metrics, the renamed operator PodMonitor scrapes HTTP
	// with no token; a parent chart's condition value is accepted.
	h := render("platform", "ops", "fullnameOverride=dt", "metrics.secure=false", "monitoring.podMonitors=true",
		"monitoring.prometheusRule=true", "enabled=true")
	eps, _, _ = unstructured.NestedSlice(h["PodMonitor/ops/dt-operator"], "spec", "podMetricsEndpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "http" || eps[0].(map[string]any)["authorization"] != nil {
		t.Errorf("PodMonitor dt-operator with metrics.secure=false: %v", eps)
	}
	if h["PrometheusRule/ops/dt"] == nil {
		t.Errorf("no PrometheusRule dt: %v", keys(h))
	}

	c := render("platform", "ops", "fullnameOverride=dt", "replicaCount=2", "imagePullSecrets[0].name=regcred",
		"podLabels.team=platform", "podAnnotations.note=x", "serviceAccount.annotations.iam=role", "global.imageRegistry=r.example")
	dep := unstructured.Unstructured{Object: c["Deployment/ops/dt-operator"]}
	if dep.Object == nil {
		t.Fatalf("no Deployment dt-operator: %v", keys(c))
	}
	replicas, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas") // a float64, as JSON decodes it
	pod, _, _ := unstructured.NestedMap(dep.Object, "spec", "template")
	podObj := unstructured.Unstructured{Object: pod}
	secrets, _, _ := unstructured.NestedSlice(pod, "spec", "imagePullSecrets")
	sa, _, _ := unstructured.NestedString(pod, "spec", "serviceAccountName")
	if fmt.Sprint(replicas) != "2" || len(secrets) != 1 || podObj.GetLabels()["team"] != "platform" || podObj.GetAnnotations()["note"] != "x" || sa != "dt-operator" {
		t.Errorf("values did not reach the pod: replicas %v, pull secrets %v, labels %v, annotations %v, account %q",
			replicas, secrets, podObj.GetLabels(), podObj.GetAnnotations(), sa)
	}
	if ann := (&unstructured.Unstructured{Object: c["ServiceAccount/ops/dt-operator"]}).GetAnnotations(); ann["iam"] != "role" {
		t.Errorf("ServiceAccount annotations: %v", ann)
	}
	containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"--webhook-service=dt-webhook", "--webhook-secret=dt-webhook-cert", "--webhook-configuration=dt-validating-webhook"} {
		if !slices.Contains(args, want) {
			t.Errorf("operator args %v lack %s", args, want)
		}
	}
	webhooks, _, _ := unstructured.NestedSlice(c["ValidatingWebhookConfiguration//dt-validating-webhook"], "webhooks")
	for _, w := range webhooks {
		if svc, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "name"); svc != "dt-webhook" || c["Service/ops/dt-webhook"] == nil {
			t.Errorf("webhook %v calls Service %q", w.(map[string]any)["name"], svc)
		}
	}
	rules, _, _ := unstructured.NestedSlice(c["ClusterRole//dt-manager"], "rules")
	found := false
	for _, r := range rules {
		names, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resourceNames")
		found = found || slices.Contains(names, "dt-validating-webhook")
	}
	if !found {
		t.Error("ClusterRole dt-manager may not update ValidatingWebhookConfiguration dt-validating-webhook")
	}
	if subj, _, _ := unstructured.NestedSlice(c["ClusterRoleBinding//dt-manager"], "subjects"); len(subj) != 1 || subj[0].(map[string]any)["name"] != "dt-operator" {
		t.Errorf("ClusterRoleBinding dt-manager binds %v", subj)
	}
}

// Installed on a real API server, the chart makes its CRDs; helm upgrade
// brings a changed CRD (a chart's crds/ directory would not); helm
// uninstall removes the operator and keeps the CRDs.
func TestChartUpgradesAndKeepsItsCRDs(t *testing.T) {
	env, err := testenv.StartEmpty()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kcfg := filepath.Join(t.TempDir(), "kubeconfig")
	env.WriteKubeconfig(t, kcfg)
	ctx := context.Background()
	crd := func() *metav1.PartialObjectMetadata {
		var c metav1.PartialObjectMetadata
		c.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "databases.daytwo.dev"}, &c); err != nil {
			t.Fatalf("CRD databases.daytwo.dev: %v", err)
		}
		return &c
	}
	if _, err := helm(t, "install", "daytwo", "charts/daytwo", "--kubeconfig", kcfg, "--namespace", "daytwo-system", "--create-namespace"); err != nil {
		t.Fatal(err)
	}
	if got := crd().Annotations["helm.sh/resource-policy"]; got != "keep" {
		t.Fatalf("installed CRD's resource policy %q", got)
	}

	// The next version's chart: a CRD that changed.
	next := filepath.Join(t.TempDir(), "daytwo")
	if err := os.CopyFS(next, os.DirFS(filepath.Join(testenv.RepoRoot(), "charts/daytwo"))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(next, "files/crds/daytwo.dev_databases.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(raw), "  name: databases.daytwo.dev\n", "  name: databases.daytwo.dev\n  labels:\n    daytwo.dev/chart-test: next\n", 1)
	if changed == string(raw) {
		t.Fatal("the CRD file has no name line to change")
	}
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(t, "upgrade", "daytwo", next, "--kubeconfig", kcfg, "--namespace", "daytwo-system"); err != nil {
		t.Fatal(err)
	}
	if got := crd().Labels["daytwo.dev/chart-test"]; got != "next" {
		t.Fatalf("helm upgrade left the CRD as it was (label %q)", got)
	}

	if _, err := helm(t, "uninstall", "daytwo", "--kubeconfig", kcfg, "--namespace", "daytwo-system", "--wait"); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "daytwo-system", Name: "daytwo-operator"}, &dep); !apierrors.IsNotFound(err) {
		t.Fatalf("after helm uninstall the operator's Deployment: %v", err)
	}
	crd() // kept

	// Another release cannot install over CRDs the first one kept, unless
	// it takes them over (docs/installation.md says how).
	if _, err := helm(t, "install", "other", "charts/daytwo", "--kubeconfig", kcfg, "--namespace", "other", "--create-namespace"); err == nil ||
		!strings.Contains(err.Error(), "invalid ownership metadata") {
		t.Fatalf("a second release over kept CRDs: %v, want Helm's ownership refusal", err)
	}
	if _, err := helm(t, "install", "other", "charts/daytwo", "--kubeconfig", kcfg, "--namespace", "other", "--create-namespace", "--take-ownership"); err != nil {
		t.Fatal(err)
	}
	if got := crd().Annotations["meta.helm.sh/release-name"]; got != "other" {
		t.Fatalf("the CRD belongs to release %q after --take-ownership", got)
	}
}
