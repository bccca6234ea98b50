// Package chart tests charts/daytwo with the real Helm (built from its Go
// module by hack/build-addons.sh, `make deps`) against config/ rendered by
// kubectl's kustomize: the two installs must be the same install.
package chart_test

import (
	"bufio"
	"bytes"
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

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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
	rendered, err := helm(t, "template", "daytwo", "charts/daytwo", "--namespace", "daytwo-system", "--include-crds")
	if err != nil {
		t.Fatal(err)
	}
	chart := objects(t, rendered)
	kust := objects(t, kustomize(t, "config/default"))
	delete(kust, "Namespace//daytwo-system")
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
	for value, field := range map[string]string{"logLevel=loud": "logLevel", "image.tag=": "tag", "monitoring.podmonitors=true": "podmonitors",
		"watchNamespaces={Apps}": "watchNamespaces"} {
		_, err := helm(t, "template", "daytwo", "charts/daytwo", "--set", value)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("--set %s: %v, want a refusal naming %s", value, err, field)
		}
	}
}
