//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/testenv"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
)

// plugin runs the kubectl plugin (built once from cmd/kubectl-daytwo) in
// namespace ns, and returns its output; a failure fails the test.
func plugin(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, code := pluginExit(t, ns, args...)
	if code != 0 {
		t.Fatalf("kubectl daytwo %s: exit code %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// pluginExit runs the plugin as plugin does and returns its output and
// exit code, for the commands whose code a pipeline reads.
func pluginExit(t *testing.T, ns string, args ...string) (string, int) {
	t.Helper()
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "daytwo-e2e-plugin-") //nolint:usetesting // built once for every suite, not one test
		if err != nil {
			pluginErr = err
			return
		}
		pluginPath = filepath.Join(dir, "kubectl-daytwo")
		build := exec.Command("go", "build", "-o", pluginPath, "./cmd/kubectl-daytwo")
		build.Dir = framework.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			pluginErr = err
			t.Logf("%s", out)
		}
	})
	if pluginErr != nil {
		t.Fatalf("building the plugin: %v", pluginErr)
	}
	cmd := exec.Command(pluginPath, append([]string{"-n", ns}, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kubectl daytwo %s: %v", strings.Join(args, " "), err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// checkPlugin runs every command of the kubectl plugin against a Ready
// Database of two instances (db, with the table ballast) and its logical
// DatabaseBackup (backup), as a DBA would.
func checkPlugin(t *testing.T, ns, db, backup string) {
	ctx := context.Background()
	status := plugin(t, ns, "status", db)
	t.Logf("kubectl daytwo status %s:\n%s", db, status)
	for _, want := range []string{db + "-0", db + "-1", "primary", "replica", backup, "Logical", "Ready", "Certificate"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	var list struct {
		Items []struct {
			Kind   string
			Status struct{ Primary string }
		}
	}
	if err := json.Unmarshal([]byte(plugin(t, ns, "status", db, "-o", "json")), &list); err != nil ||
		len(list.Items) < 2 || list.Items[0].Kind != "Database" || list.Items[0].Status.Primary == "" {
		t.Errorf("status -o json: %v %+v", err, list)
	}
	// The operator is a release (hack/release.sh), the plugin a dev build:
	// the skew is named.
	if v := plugin(t, ns, "version"); !strings.Contains(v, "Operator: v") || !strings.Contains(v, "WARNING: the plugin (dev)") {
		t.Errorf("kubectl daytwo version:\n%s", v)
	}
	if got := strings.TrimSpace(plugin(t, ns, "psql", db, "--", "-tAc", "SELECT count(*) FROM ballast")); got != "300000" {
		t.Errorf("psql counted %q rows in ballast, want 300000", got)
	}

	// backup: one more run.
	b := &v1alpha1.DatabaseBackup{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: backup}, b); err != nil {
		t.Fatal(err)
	}
	stored := len(b.Status.Backups)
	t.Logf("kubectl daytwo backup %s --wait: %s", db, strings.TrimSpace(plugin(t, ns, "backup", db, "--wait", "--timeout", "3m")))
	b = waitBackup(t, ns, backup, time.Second, "the requested run stored", func(b *v1alpha1.DatabaseBackup) bool {
		return len(b.Status.Backups) > stored && meta.IsStatusConditionFalse(b.Status.Conditions, v1alpha1.ConditionLastRunFailed)
	})
	// backup list: what the bucket holds, read there by a pod.
	listed := plugin(t, ns, "backup", "list", backup)
	t.Logf("kubectl daytwo backup list %s:\n%s", backup, listed)
	for _, s := range b.Status.Backups {
		if !strings.Contains(listed, s.ID) {
			t.Errorf("backup list lacks %s", s.ID)
		}
	}

	// restore: a new Database from it, holding the same rows.
	dry := plugin(t, ns, "restore", backup, "--to", db+"-copy", "--dry-run")
	if !strings.Contains(dry, "backupRef") || !strings.Contains(dry, "name: "+backup) {
		t.Errorf("restore --dry-run printed:\n%s", dry)
	}
	t.Logf("kubectl daytwo restore --wait: %s", strings.TrimSpace(plugin(t, ns, "restore", backup, "--to", db+"-copy", "--instances", "1", "--wait", "--timeout", "4m")))
	waitDatabase(t, ns, db+"-copy", time.Second, "restored and Ready", isReady(1, ""))
	if got := strings.TrimSpace(plugin(t, ns, "psql", db+"-copy", "--", "-tAc", "SELECT count(*) FROM ballast")); got != "300000" {
		t.Errorf("the restored copy holds %q rows, want 300000", got)
	}

	// switchover to the best replica, then promote the old primary back.
	first := waitDatabase(t, ns, db, time.Minute, "Ready", isReady(2, "")).Status.Primary
	t.Logf("kubectl daytwo switchover --wait: %s", strings.TrimSpace(plugin(t, ns, "switchover", db, "--wait", "--timeout", "2m")))
	waitDatabase(t, ns, db, 2*time.Minute, "a new primary", func(d *v1alpha1.Database) bool {
		return d.Status.Primary != first && isReady(2, "")(d)
	})
	t.Logf("kubectl daytwo promote: %s", strings.TrimSpace(plugin(t, ns, "promote", db, first)))
	waitDatabase(t, ns, db, 2*time.Minute, first+" primary again", func(d *v1alpha1.Database) bool {
		return d.Status.Primary == first && isReady(2, "")(d)
	})

	// logs: every instance, the instance manager's lines made readable.
	logs := plugin(t, ns, "logs", db, "--since", "15m")
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	t.Logf("kubectl daytwo logs %s: %d lines; the last 6:\n%s", db, len(lines), strings.Join(lines[max(0, len(lines)-6):], "\n"))
	for _, want := range []string{db + "-0 ", db + "-1 ", " info ", "Promoted"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q", want)
		}
	}

	// fio: the node's local-path storage measured, briefly.
	disk := plugin(t, ns, "fio", "disk", "--storage-class", "local-path", "--size", "64Mi", "--runtime", "2s", "--wait", "--timeout", "3m")
	if !strings.Contains(disk, "data-8k-randrw") || !strings.Contains(disk, "wal-1m-write") || !strings.Contains(disk, "IOPS=") {
		t.Errorf("kubectl daytwo fio printed:\n%s", disk)
	}

	// report: a bundle with the objects and logs, and no secret value.
	file := filepath.Join(t.TempDir(), "report.tar.gz")
	t.Logf("kubectl daytwo report: %s", strings.TrimSpace(plugin(t, ns, "report", db, "-o", file)))
	files := testenv.ReadTarGz(t, file)
	for _, want := range []string{"database.yaml", "databasebackups.yaml", "pods.yaml", "events.yaml", "statefulsets.yaml", "secrets.yaml",
		"logs/" + db + "-0/postgres.log", "logs/" + db + "-1/postgres.log"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the report lacks %s", want)
		}
	}
	secrets := &corev1.SecretList{}
	if err := cluster.Client.List(ctx, secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if !framework.SecretKey(k) || len(v) < 8 {
				continue
			}
			for name, content := range files {
				if strings.Contains(content, string(v)) {
					t.Errorf("the report's %s holds the value of Secret %s key %s", name, s.Name, k)
				}
			}
		}
	}
}
