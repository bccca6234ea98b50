package argocd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/daytwo-dev/daytwo/internal/argocd"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

func script(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config/argocd/health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The health check against statuses captured from real objects on the
// real node (testdata: a Database ready and with a hung replica, a
// DatabaseBackup whose run failed and then succeeded, WebApps available,
// rolling out and rolled back), and against the edges no capture shows.
func TestHealthOfCapturedStatuses(t *testing.T) {
	lua := script(t)
	for file, want := range map[string]string{
		"database-ready.json":         "Healthy",
		"database-replica-hung.json":  "Degraded",
		"backup-succeeded.json":       "Healthy",
		"backup-last-run-failed.json": "Degraded",
		"webapp-available.json":       "Healthy",
		"webapp-rolling-out.json":     "Progressing",
		"webapp-rolled-back.json":     "Degraded",
	} {
		obj := captured(t, file)
		h, err := argocd.Evaluate(lua, obj)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if h.Status != want || h.Message == "" {
			t.Errorf("%s: %s (%q), want %s with a message", file, h.Status, h.Message, want)
		}
	}
}

func TestHealthEdges(t *testing.T) {
	lua := script(t)
	cond := func(typ, status, reason string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": typ + " " + reason}
	}
	obj := func(generation, observed float64, conds ...map[string]any) map[string]any {
		list := []any{}
		for _, c := range conds {
			list = append(list, c)
		}
		return map[string]any{"metadata": map[string]any{"generation": generation},
			"status": map[string]any{"observedGeneration": observed, "conditions": list}}
	}
	for name, c := range map[string]struct {
		obj  map[string]any
		want string
	}{
		"no status":              {map[string]any{"metadata": map[string]any{"generation": 1.0}}, "Progressing"},
		"spec not observed":      {obj(2, 1, cond("Ready", "True", "Available")), "Progressing"},
		"invalid spec":           {obj(1, 1, cond("Ready", "False", "InvalidSpec")), "Degraded"},
		"restore failed":         {obj(1, 1, cond("Ready", "False", "RestoreFailed")), "Degraded"},
		"starting":               {obj(1, 1, cond("Ready", "False", "Reconciling")), "Progressing"},
		"failing over":           {obj(1, 1, cond("Ready", "False", "FailingOver")), "Progressing"},
		"upgrade failed":         {obj(1, 1, cond("Ready", "True", "Available"), cond("UpgradeFailed", "True", "MajorUpgradeFailed")), "Degraded"},
		"verification failed":    {obj(1, 1, cond("Ready", "True", "Scheduled"), cond("Verified", "False", "VerificationFailed")), "Degraded"},
		"stale":                  {obj(1, 1, cond("Ready", "True", "Scheduled"), cond("BackupStale", "True", "NoRecentBackup")), "Degraded"},
		"archiving failed":       {obj(1, 1, cond("Ready", "True", "Available"), cond("ContinuousArchiving", "False", "ArchivingFailed")), "Degraded"},
		"archiving starting":     {obj(1, 1, cond("Ready", "True", "Available"), cond("ContinuousArchiving", "False", "ArchivingStarting")), "Healthy"},
		"suspended":              {obj(1, 1, cond("Ready", "True", "Suspended")), "Suspended"},
		"switchover in progress": {obj(1, 1, cond("Ready", "True", "Available"), cond("Progressing", "True", "SwitchingOver")), "Progressing"},
		"canary step":            {obj(1, 1, cond("Ready", "True", "Available"), cond("Progressing", "True", "CanaryProgressing")), "Progressing"},
		"canary waiting":         {obj(1, 1, cond("Ready", "True", "Available"), cond("Progressing", "True", "CanaryWaiting")), "Suspended"},
		"canary aborted": {obj(1, 1, cond("Ready", "True", "Available"), cond("Progressing", "False", "CanaryAborted"),
			cond("Degraded", "True", "CanaryAborted")), "Degraded"},
	} {
		h, err := argocd.Evaluate(lua, c.obj)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h.Status != c.want {
			t.Errorf("%s: %s (%q), want %s", name, h.Status, h.Message, c.want)
		}
	}
}

// The ConfigMap users merge into Argo CD holds the script, once per kind.
func TestConfigMapHoldsTheScript(t *testing.T) {
	cm := configMap(t)
	lua := script(t)
	for _, kind := range []string{"Database", "DatabaseBackup", "WebApp"} {
		got := cm.Health(kind)
		if strings.TrimSpace(got) != strings.TrimSpace(lua) {
			t.Errorf("argocd-cm.yaml's health check of %s differs from health.lua: run make manifests", kind)
		}
	}
}
