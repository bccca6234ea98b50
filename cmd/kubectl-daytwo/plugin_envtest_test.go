package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

// The plugin against a real API server with daytwo's operator and webhook
// (envtest: no node, so no pod runs; the tests play the Job controller
// where a run must end, as the operator's own envtest suites do).
var tenv *testenv.Env

func TestMain(m *testing.M) {
	code := func() int {
		env, stop, err := testenv.StartOperator()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = stop() }()
		tenv = env
		return m.Run()
	}()
	os.Exit(code)
}

// run runs the plugin with args in namespace ns, as `kubectl daytwo` would.
func run(t *testing.T, ns string, args ...string) (string, error) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	tenv.WriteKubeconfig(t, kubeconfig)
	var out bytes.Buffer
	root := newRootCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
	root.SetArgs(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...))
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

func mustRun(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := run(t, ns, args...)
	if err != nil {
		t.Fatalf("kubectl daytwo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := tenv.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func orders(ns string) *v1alpha1.Database {
	return &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}, Spec: v1alpha1.DatabaseSpec{
		Version: "17", Instances: ptr.To[int32](3), Parameters: map[string]string{"work_mem": "64MB"},
		Replication: &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 1}},
		Backup:      &v1alpha1.DatabaseBackupPolicy{Schedule: "0 3 * * *", Storage: s3Storage()},
	}}
}

func s3Storage() v1alpha1.BackupStorage {
	return v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio:9000", Bucket: "backups", Insecure: true,
		CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}}
}

// The usage reads `kubectl daytwo`; completion and version --client need
// no cluster; names complete from the cluster.
func TestUsageCompletionAndVersion(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	root.SetArgs([]string{"--kubeconfig", filepath.Join(t.TempDir(), "none"), "completion", "bash"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "bash completion") {
		t.Fatalf("completion without a cluster: %v\n%.200s", err, out.String())
	}
	out.Reset()
	root = newRootCmd(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	root.SetArgs([]string{"--kubeconfig", filepath.Join(t.TempDir(), "none"), "version", "--client"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Plugin: dev") {
		t.Fatalf("version --client: %v %s", err, out.String())
	}
	out.Reset()
	root = newRootCmd(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "kubectl daytwo [command]") ||
		!strings.Contains(out.String(), "Backups and restores:") {
		t.Errorf("help: %v\n%s", err, out.String())
	}

	ns := tenv.Namespace(t)
	create(t, orders(ns))
	got := mustRun(t, ns, "__complete", "status", "or")
	if !strings.Contains(got, "orders\n") {
		t.Errorf("status completes %q", got)
	}
	// The operator's version, from its Deployment, and a warning when its
	// minor version is not the plugin's.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "daytwo-operator",
		Labels: map[string]string{"app.kubernetes.io/name": "daytwo", "app.kubernetes.io/component": "operator"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "daytwo"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "daytwo"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "registry.example/daytwo:v0.3.1"}}}}}}
	create(t, dep)
	got = mustRun(t, ns, "version", "-o", "json")
	var v versions
	if err := json.Unmarshal([]byte(got[:strings.LastIndex(got, "}")+1]), &v); err != nil || len(v.Operators) != 1 || v.Operators[0].Version != "v0.3.1" {
		t.Errorf("version -o json: %v %s", err, got)
	}
	if !strings.Contains(got, "WARNING: the plugin (dev) and the operator (v0.3.1)") {
		t.Errorf("no skew warning: %s", got)
	}

	// report operator: the Deployment, the versions, the CRDs without
	// their schemas, and no Secret.
	bundle := filepath.Join(t.TempDir(), "operator.tar.gz")
	mustRun(t, ns, "report", "operator", "-o", bundle)
	files := testenv.ReadTarGz(t, bundle)
	for _, want := range []string{ns + "/deployment-daytwo-operator.yaml", ns + "/pods.yaml", ns + "/leases.yaml", "versions.yaml", "crds.yaml", "webhookconfigurations.yaml"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the operator report lacks %s (has %v)", want, slices.Collect(maps.Keys(files)))
		}
	}
	if crds := files["crds.yaml"]; !strings.Contains(crds, "databases.daytwo.dev") || strings.Contains(crds, "openAPIV3Schema") {
		t.Errorf("crds.yaml: %.300s", crds)
	}
}

func TestVersionSkew(t *testing.T) {
	for _, c := range []struct {
		plugin, operator string
		warn             bool
	}{{"v0.3.0", "v0.3.4", false}, {"v0.3.0", "v0.4.0", true}, {"v1.0.0", "v0.9.0", true}, {"dev", "dev", false}, {"dev", "v0.3.0", true}} {
		if got := versionSkew(c.plugin, c.operator); (got != "") != c.warn {
			t.Errorf("versionSkew(%s, %s) = %q", c.plugin, c.operator, got)
		}
	}
}

// status -o json|yaml prints the Database and its DatabaseBackups as a
// List kubectl and jq read; a wrong -o is refused by name.
func TestStatusOutput(t *testing.T) {
	ns := tenv.Namespace(t)
	create(t, orders(ns))
	testenv.Eventually(t, "the backup spec.backup makes", func() (bool, error) {
		err := tenv.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "orders-backup"}, &v1alpha1.DatabaseBackup{})
		return err == nil, client.IgnoreNotFound(err)
	})
	for _, format := range []string{"json", "yaml"} {
		got := mustRun(t, ns, "status", "orders", "-o", format)
		var list struct {
			Kind  string
			Items []struct {
				Kind     string
				Metadata metav1.ObjectMeta
			}
		}
		if err := yaml.Unmarshal([]byte(got), &list); err != nil || list.Kind != "List" || len(list.Items) != 2 ||
			list.Items[0].Kind != "Database" || list.Items[1].Kind != "DatabaseBackup" || list.Items[1].Metadata.Name != "orders-backup" {
			t.Errorf("status -o %s: %v\n%.400s", format, err, got)
		}
	}
	if _, err := run(t, ns, "status", "orders", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("-o xml: %v", err)
	}
}

// restore copies the source's spec, less its bootstrap, replica source,
// hibernation and fenced instances.
func TestRestoreCopiesTheSpec(t *testing.T) {
	ns := tenv.Namespace(t)
	db := orders(ns)
	db.Spec.FencedInstances = []string{"orders-2"}
	create(t, db, &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"}, Storage: s3Storage()}})
	got := mustRun(t, ns, "restore", "nightly", "--to", "orders-copy", "--time", "2026-11-30T01:00:00Z", "--dry-run")
	restored := &v1alpha1.Database{}
	if err := yaml.UnmarshalStrict([]byte(got), restored); err != nil {
		t.Fatal(err)
	}
	live := &v1alpha1.Database{}
	if err := tenv.Client.Get(t.Context(), client.ObjectKeyFromObject(db), live); err != nil {
		t.Fatal(err)
	}
	want := live.Spec // with the defaults the API server set
	want.FencedInstances = nil
	want.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{BackupRef: v1alpha1.LocalObjectReference{Name: "nightly"},
		TargetTime: &metav1.Time{Time: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)}}}
	gotSpec, _ := json.Marshal(restored.Spec)
	wantSpec, _ := json.Marshal(want)
	if !bytes.Equal(gotSpec, wantSpec) {
		t.Errorf("restored spec\n%s\nwant\n%s", gotSpec, wantSpec)
	}
	// And it is accepted as it is.
	mustRun(t, ns, "restore", "nightly", "--to", "orders-copy", "--lsn", "0/3000060")
}

// backup --wait follows the run it asked for, to its end: a failed run
// exits 1 with the reason.
func TestBackupWaitsForItsRun(t *testing.T) {
	ns := tenv.Namespace(t)
	create(t, &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}, Spec: v1alpha1.DatabaseSpec{Version: "17"}},
		&v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
			Spec: v1alpha1.DatabaseBackupSpec{DatabaseRef: v1alpha1.LocalObjectReference{Name: "orders"}, Storage: s3Storage(),
				Schedule: "0 3 * * *"}})
	done := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = run(t, ns, "backup", "orders", "--wait", "--timeout", "2m")
		done <- err
	}()
	var job batchv1.Job
	testenv.Eventually(t, "the run's Job", func() (bool, error) {
		list := &batchv1.JobList{}
		err := tenv.Client.List(context.Background(), list, client.InNamespace(ns))
		if err != nil || len(list.Items) == 0 {
			return false, err
		}
		job = list.Items[0]
		return true, nil
	})
	select {
	case err := <-done:
		t.Fatalf("backup --wait returned before its run ended: %v\n%s", err, out)
	default:
	}
	finishJobFailed(t, &job, "could not reach minio:9000")
	err := <-done
	var ee exitError
	if !errors.As(err, &ee) || ee.code != exitFailed || !strings.Contains(out, "Requested a run") {
		t.Errorf("backup --wait: %v (%#v)\n%s", err, err, out)
	}
}

// finishJobFailed plays the Job controller and the kubelet: the pod ended
// with msg as its termination message, then the Job failed.
func finishJobFailed(t *testing.T, job *batchv1.Job, msg string) {
	t.Helper()
	ctx := context.Background()
	res, _ := json.Marshal(map[string]string{"error": msg})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-pod", Labels: map[string]string{batchv1.JobNameLabel: job.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := tenv.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: string(res)}}}}
	if err := tenv.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testenv.FinishJob(job, metav1.Now(), false)
	if err := tenv.Client.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}

// upgrade retry sets the annotation only where an upgrade waits; pgbench
// makes a restricted Job with the credentials by reference; fio a
// restricted Job on a claim of the class measured.
func TestUpgradeRetryAndPgbench(t *testing.T) {
	ns := tenv.Namespace(t)
	db := orders(ns)
	create(t, db)
	tenv.UpdateStatus(t, db, func() { db.Status.CurrentVersion = "17.6"; db.Status.CurrentImage = "localhost/postgres:17" })
	if _, err := run(t, ns, "upgrade", "retry", "orders"); err == nil || !strings.Contains(err.Error(), "no upgrade to retry") {
		t.Errorf("upgrade retry with nothing to retry: %v", err)
	}
	tenv.UpdateStatus(t, db, func() { db.Status.CurrentVersion = "15.14" })
	mustRun(t, ns, "upgrade", "retry", "orders")
	if err := tenv.Client.Get(t.Context(), client.ObjectKeyFromObject(db), db); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, db.Annotations[v1alpha1.AnnotationRetryUpgrade]); err != nil {
		t.Errorf("retry-upgrade annotation %q", db.Annotations[v1alpha1.AnnotationRetryUpgrade])
	}

	mustRun(t, ns, "pgbench", "orders", "--job-name", "size", "--", "-c", "4", "-T", "30")
	job := &batchv1.Job{}
	if err := tenv.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "size"}, job); err != nil {
		t.Fatal(err)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if strings.Join(c.Command, " ") != "pgbench -c 4 -T 30" || c.Image != "localhost/postgres:17" || *c.SecurityContext.AllowPrivilegeEscalation ||
		!*job.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("pgbench Job: %v %s", c.Command, c.Image)
	}
	for _, e := range c.Env {
		if e.Value != "" && e.Name == "PGPASSWORD" {
			t.Errorf("the password is in the Job")
		}
	}

	// fio: a claim of the class and a restricted Job on it, the claim
	// owned by the Job.
	if _, err := run(t, ns, "fio", "disk", "--size", "lots"); err == nil || !strings.Contains(err.Error(), "--size") {
		t.Errorf("fio --size lots: %v", err)
	}
	mustRun(t, ns, "fio", "disk", "--storage-class", "fast", "--size", "4Gi", "--runtime", "10s")
	claim := &corev1.PersistentVolumeClaim{}
	if err := tenv.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "disk"}, claim); err != nil {
		t.Fatal(err)
	}
	fio := &batchv1.Job{}
	if err := tenv.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "disk"}, fio); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(fio.Spec.Template.Spec.Containers[0].Command, " ")
	if *claim.Spec.StorageClassName != "fast" || claim.Spec.Resources.Requests.Storage().String() != "4Gi" ||
		!metav1.IsControlledBy(claim, fio) || !strings.Contains(args, "--size=1073741824") || !strings.Contains(args, "--runtime=10s") ||
		!*fio.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("fio: claim %v of %v, Job %s", claim.Spec.StorageClassName, claim.Spec.Resources.Requests, args)
	}
}
