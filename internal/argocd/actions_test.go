package argocd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/argocd"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

func configMap(t *testing.T) argocd.ConfigMap {
	t.Helper()
	cm, err := argocd.LoadConfigMap(filepath.Join(testenv.RepoRoot(), "config/argocd/argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func actionsOf(t *testing.T, kind string) argocd.Actions {
	t.Helper()
	a, err := configMap(t).Actions(kind)
	if err != nil || a.Discovery == "" {
		t.Fatalf("argocd-cm.yaml's actions of %s: %v (run make manifests)", kind, err)
	}
	return a
}

func captured(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// offered is the enabled actions discovery offers on obj; it also checks
// that every action discovery names has a script, and every script is
// named.
func offered(t *testing.T, a argocd.Actions, obj map[string]any) []string {
	t.Helper()
	found, err := argocd.Discover(a.Discovery, obj)
	if err != nil {
		t.Fatal(err)
	}
	var all, defined, enabled []string
	for _, f := range found {
		all = append(all, f.Name)
		if !f.Disabled {
			enabled = append(enabled, f.Name)
		}
	}
	for _, d := range a.Definitions {
		defined = append(defined, d.Name)
	}
	sort.Strings(defined)
	if !reflect.DeepEqual(all, defined) {
		t.Errorf("discovery names %v, the definitions %v", all, defined)
	}
	return enabled
}

func with(obj map[string]any, path []string, v any) map[string]any {
	b, _ := json.Marshal(obj)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	m := out
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
	return out
}

// Each kind offers its actions only where they mean something: a
// switchover with a replica to switch to, an upgrade retry after a failed
// upgrade, pause or resume as the annotation stands, canary promotion and
// abort while a canary runs.
func TestActionsOffered(t *testing.T) {
	db := captured(t, "database-ready.json")
	two := with(db, []string{"spec", "instances"}, 2.0)
	paused := with(two, []string{"metadata", "annotations"}, map[string]any{v1alpha1.AnnotationReconcile: v1alpha1.ReconcilePaused})
	failed := with(two, []string{"status", "conditions"}, []any{
		map[string]any{"type": v1alpha1.ConditionUpgradeFailed, "status": "True", "reason": v1alpha1.ReasonMajorUpgradeFailed}})
	app := captured(t, "webapp-available.json")
	canary := func(step, steps float64) map[string]any {
		return with(app, []string{"status", "canary"}, map[string]any{"step": step, "steps": steps})
	}
	for name, c := range map[string]struct {
		kind string
		obj  map[string]any
		want []string
	}{
		"one instance":           {"Database", db, []string{"pause"}},
		"two instances":          {"Database", two, []string{"pause", "switchover"}},
		"paused":                 {"Database", paused, []string{"resume"}},
		"upgrade failed":         {"Database", failed, []string{"pause", "retry-upgrade", "switchover"}},
		"backup":                 {"DatabaseBackup", captured(t, "backup-succeeded.json"), []string{"backup-now"}},
		"no canary":              {"WebApp", app, nil},
		"rolling out":            {"WebApp", captured(t, "webapp-rolling-out.json"), nil},
		"canary on its 1st step": {"WebApp", canary(1, 3), []string{"abort-canary", "promote-canary"}},
		"canary promoted":        {"WebApp", canary(4, 3), nil},
	} {
		if got := offered(t, actionsOf(t, c.kind), c.obj); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %s offers %v, want %v", name, c.kind, got, c.want)
		}
	}
}

// Each action sets the annotation daytwo reads, with a value daytwo
// takes (an RFC 3339 time of now where it wants one), and changes nothing
// else.
func TestActionsSetWhatDaytwoReads(t *testing.T) {
	db := with(captured(t, "database-ready.json"), []string{"metadata", "annotations"}, map[string]any{"team": "shop"})
	// A target an earlier switchover named goes: it is the primary now.
	targeted := with(db, []string{"metadata", "annotations", v1alpha1.AnnotationSwitchoverTo}, "orders-1")
	if got := annotations(runAction(t, "Database", "switchover", targeted)); got[v1alpha1.AnnotationSwitchoverTo] != nil || got["team"] != "shop" {
		t.Errorf("switchover kept %v", got)
	}
	for _, c := range []struct {
		kind, action, annotation string
		obj                      map[string]any
	}{
		{"Database", "switchover", v1alpha1.AnnotationSwitchoverRequested, db},
		{"Database", "retry-upgrade", v1alpha1.AnnotationRetryUpgrade, captured(t, "database-ready.json")},
		{"DatabaseBackup", "backup-now", v1alpha1.AnnotationBackupRequested, captured(t, "backup-succeeded.json")},
		{"WebApp", "promote-canary", v1alpha1.AnnotationPromoteRequested, captured(t, "webapp-available.json")},
		{"WebApp", "abort-canary", v1alpha1.AnnotationAbortRequested, captured(t, "webapp-available.json")},
	} {
		before := time.Now().Truncate(time.Second)
		out := runAction(t, c.kind, c.action, c.obj)
		v, _ := annotations(out)[c.annotation].(string)
		at, err := time.Parse(time.RFC3339, v)
		if err != nil || at.Before(before) || at.After(time.Now()) {
			t.Errorf("%s %s: %s=%q, want an RFC 3339 time of now (%v)", c.kind, c.action, c.annotation, v, err)
		}
		want := with(c.obj, []string{"metadata", "annotations", c.annotation}, v)
		if !reflect.DeepEqual(out, want) {
			t.Errorf("%s %s changed more than %s:\n%v\nwant\n%v", c.kind, c.action, c.annotation, out, want)
		}
	}
}

func TestPauseAndResume(t *testing.T) {
	db := with(captured(t, "database-ready.json"), []string{"metadata", "annotations"}, map[string]any{"team": "shop"})
	paused := runAction(t, "Database", "pause", db)
	if got := annotations(paused); got[v1alpha1.AnnotationReconcile] != v1alpha1.ReconcilePaused || got["team"] != "shop" {
		t.Fatalf("pause: annotations %v", got)
	}
	resumed := runAction(t, "Database", "resume", paused)
	if !reflect.DeepEqual(resumed, db) {
		t.Errorf("resume: %v, want %v", resumed["metadata"], db["metadata"])
	}
	// The pause as the only annotation: an emptied table is an empty
	// array to Argo CD, which then keeps the annotations as they were.
	// The resume leaves a value that does not pause.
	only := runAction(t, "Database", "resume", runAction(t, "Database", "pause", captured(t, "database-ready.json")))
	if got := annotations(only); got == nil || got[v1alpha1.AnnotationReconcile] == v1alpha1.ReconcilePaused {
		t.Errorf("resume of the only annotation: metadata %v", only["metadata"])
	}
}

func runAction(t *testing.T, kind, action string, obj map[string]any) map[string]any {
	t.Helper()
	script := actionsOf(t, kind).Script(action)
	if script == "" {
		t.Fatalf("%s has no action %s", kind, action)
	}
	out, err := argocd.Run(script, obj)
	if err != nil {
		t.Fatalf("%s %s: %v", kind, action, err)
	}
	return out
}

func annotations(obj map[string]any) map[string]any {
	m, _ := obj["metadata"].(map[string]any)
	a, _ := m["annotations"].(map[string]any)
	return a
}

// Argo CD opens no string library and only os.date and os.time for
// scripts from argocd-cm: a script that uses more fails here as it would
// there.
func TestScriptsGetArgoCDsLibrariesOnly(t *testing.T) {
	for _, script := range []string{`return {status = string.upper("x")}`, `os.execute("true") return {}`, `return {status = os.getenv("HOME")}`} {
		if _, err := argocd.Evaluate(script, map[string]any{}); err == nil {
			t.Errorf("%s ran", script)
		}
	}
	if h, err := argocd.Evaluate(`local os = require("os") return {status = os.date("!%Y")}`, map[string]any{}); err != nil || h.Status == "" {
		t.Errorf("os.date: %v %v", h, err)
	}
}
