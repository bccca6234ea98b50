//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

const (
	postgresNextImage    = "localhost/postgres:" + postgresMajor + "-e2e-next"
	postgresMissingImage = "localhost/postgres:" + postgresMajor + "-e2e-missing"
)

// restrictedNamespace is a test namespace that enforces the restricted Pod
// Security Standard, so every Database pod proves it meets it.
func restrictedNamespace(t *testing.T) string {
	ns := cluster.Namespace(t)
	labelPodSecurity(t, ns, "restricted")
	return ns
}

func createDatabase(t *testing.T, ns, name string, mutate func(*v1alpha1.Database)) *v1alpha1.Database {
	t.Helper()
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.DatabaseSpec{Version: postgresMajor}}
	if mutate != nil {
		mutate(db)
	}
	if db.Spec.Size == "" && db.Spec.Resources == nil {
		db.Spec.Resources = leanResources()
	}
	if err := cluster.Client.Create(context.Background(), db); err != nil {
		t.Fatalf("create Database %s: %v", name, err)
	}
	return db
}

// leanResources are the limits of a size tier (the small one: what the
// instance manager tunes PostgreSQL for) with a CPU request of 50m: the
// real node has 2 CPUs, and the suites that run in parallel would
// otherwise wait for each other's requests (a small instance asks for
// 250m) rather than for CPU they use. The suites that check a tier's
// requests (TestDatabaseSmallLifecycle, TestDatabaseMediumUpgradeAndRollback)
// name their size and keep them.
func leanResources() *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
}

func updateDatabase(t *testing.T, ns, name string, mutate func(*v1alpha1.Database)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		db := &v1alpha1.Database{}
		if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, db); err != nil {
			return err
		}
		mutate(db)
		return cluster.Client.Update(context.Background(), db)
	})
	if err != nil {
		t.Fatalf("update Database %s: %v", name, err)
	}
}

// waitFor waits until cond holds for the named object and returns it.
func waitFor[T client.Object](t *testing.T, obj T, ns, name string, timeout time.Duration, what string, cond func(T) bool) T {
	t.Helper()
	framework.Eventually(t, timeout, name+": "+what, func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(obj), nil
	})
	return obj
}

func waitDatabase(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*v1alpha1.Database) bool) *v1alpha1.Database {
	t.Helper()
	return waitFor(t, &v1alpha1.Database{}, ns, name, timeout, what, cond)
}

// sawTarget: one of statuses showed the primary moving to target, not
// there yet, with the condition typ saying so by reason.
func sawTarget(statuses []v1alpha1.DatabaseStatus, target, typ, reason string) bool {
	for _, st := range statuses {
		c := meta.FindStatusCondition(st.Conditions, typ)
		if st.TargetPrimary == target && st.Primary != target && c != nil && c.Reason == reason {
			return true
		}
	}
	return false
}

func isReady(instances int32, image string) func(*v1alpha1.Database) bool {
	return func(db *v1alpha1.Database) bool {
		return db.Status.Phase == v1alpha1.DatabasePhaseReady && db.Status.ReadyInstances == instances &&
			db.Status.ObservedGeneration == db.Generation && (image == "" || db.Status.CurrentImage == image)
	}
}

func hasCondition(typ string, status metav1.ConditionStatus, reason string) func(*v1alpha1.Database) bool {
	return func(db *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(db.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason
	}
}

// psqlPod runs a client pod with the Database's generated password.
func psqlPod(t *testing.T, ns, name, db string) {
	t.Helper()
	cluster.RunPod(t, framework.PSQLPod(ns, name, postgresImage, db))
}

func sql(t *testing.T, ns, pod, host, query string) string {
	t.Helper()
	return strings.TrimSpace(cluster.PSQL(t, ns, pod, "client", host+"."+ns+".svc.cluster.local", "app", "app", query))
}

// writeUntilAccepted runs query through host from pod until it succeeds,
// within a minute: the first write after a failover.
func writeUntilAccepted(t *testing.T, ns, pod, host, query string) {
	t.Helper()
	framework.Eventually(t, time.Minute, "a write through "+host, func(ctx context.Context) (bool, error) {
		// Each attempt is bounded, as an application's would be: a
		// connection to an endpoint that just went away must not hang.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, stderr, err := cluster.Exec(ctx, ns, pod, "client", "psql",
			"host="+host+"."+ns+".svc.cluster.local user=app dbname=app connect_timeout=2", "-qtAc", query)
		if err != nil {
			t.Logf("write through %s: %v: %s", host, err, strings.TrimSpace(stderr))
		}
		return err == nil, nil
	})
}

func podUID(t *testing.T, ns, name string) types.UID {
	t.Helper()
	p := &corev1.Pod{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p.UID
}

// eventsFor returns the messages of the Database's events with reason, oldest first.
func eventsFor(t *testing.T, ns, name, reason string) []string {
	t.Helper()
	list := &corev1.EventList{}
	if err := cluster.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Database" && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// A small Database: psql through -rw with the generated credentials, data
// that survives the pod, a restart-only setting rolled in, a storage resize
// the StorageClass refuses, and Retain keeping the data for a new Database.
func TestDatabaseSmallLifecycle(t *testing.T) {
	requireRealNode(t)
	ns := restrictedNamespace(t)
	start := time.Now()
	createDatabase(t, ns, "orders", func(db *v1alpha1.Database) { db.Spec.Size = v1alpha1.SizeSmall })
	db := waitDatabase(t, ns, "orders", 3*time.Minute, "Ready", isReady(1, postgres.DefaultImage(postgresMajor)))
	t.Logf("Database Ready in %s", time.Since(start).Round(10*time.Millisecond))
	if db.Status.Primary != "orders-0" || db.Status.Endpoint != "orders-rw."+ns+".svc:5432" || db.Status.SecretName != "orders-credentials" {
		t.Errorf("status: %+v", db.Status)
	}

	psqlPod(t, ns, "psql", "orders")
	if got := sql(t, ns, "psql", "orders-rw", "CREATE TABLE items (v int); INSERT INTO items VALUES (40), (2); SELECT sum(v) FROM items"); got != "42" {
		t.Fatalf("psql through orders-rw answered %q", got)
	}
	if got := sql(t, ns, "psql", "orders-rw", "SHOW shared_buffers"); got != "256MB" {
		t.Errorf("shared_buffers = %s, want the tuned 256MB for 1Gi", got)
	}
	checkTLS(t, ns, "orders")
	checkAppVerifiesDatabase(t, ns, "orders")

	// The pod comes back with its data.
	old := podUID(t, ns, "orders-0")
	if err := cluster.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-0"}}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitDatabase(t, ns, "orders", 2*time.Minute, "Ready on a new pod", func(d *v1alpha1.Database) bool {
		return isReady(1, "")(d) && podUIDOrEmpty(ns, "orders-0") != old && podUIDOrEmpty(ns, "orders-0") != ""
	})
	t.Logf("pod replaced and Ready in %s", time.Since(start).Round(10*time.Millisecond))
	if got := sql(t, ns, "psql", "orders-rw", "SELECT sum(v) FROM items"); got != "42" {
		t.Fatalf("after the pod came back: %q", got)
	}

	// A restart-only setting: postgres restarts in place, in the same pod,
	// which moves to the StatefulSet's new revision; the new value is live.
	old = podUID(t, ns, "orders-0")
	start = time.Now()
	updateDatabase(t, ns, "orders", func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"shared_buffers": "64MB"} })
	waitDatabase(t, ns, "orders", 2*time.Minute, "restarted with the new setting", func(d *v1alpha1.Database) bool {
		return isReady(1, "")(d) && hasCondition(v1alpha1.ConditionPendingRestart, metav1.ConditionFalse, v1alpha1.ReasonUpToDate)(d) &&
			hasCondition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete)(d)
	})
	t.Logf("a restart-only setting applied in %s", time.Since(start).Round(10*time.Millisecond))
	if got := sql(t, ns, "psql", "orders-rw", "SHOW shared_buffers"); got != "64MB" {
		t.Errorf("shared_buffers after the restart = %s", got)
	}
	if podUID(t, ns, "orders-0") != old {
		t.Errorf("a restart-only setting replaced the pod; postgres should restart in place")
	}
	checkOnUpdateRevision(t, ns, "orders")
	if ev := eventsFor(t, ns, "orders", "Restarting"); len(ev) == 0 || !strings.Contains(ev[len(ev)-1], "in place") {
		t.Errorf("Restarting events: %q", ev)
	}

	// A reloadable setting applies in seconds, with no restart: the operator
	// makes the kubelet refresh the ConfigMap volume instead of waiting for
	// its periodic sync (a minute or more).
	old = podUID(t, ns, "orders-0")
	start = time.Now()
	updateDatabase(t, ns, "orders", func(d *v1alpha1.Database) {
		d.Spec.Parameters = map[string]string{"shared_buffers": "64MB", "work_mem": "12MB"}
	})
	framework.Eventually(t, 30*time.Second, "work_mem reloaded", func(context.Context) (bool, error) {
		return sql(t, ns, "psql", "orders-rw", "SHOW work_mem") == "12MB", nil
	})
	t.Logf("a reloadable setting applied %s after the change", time.Since(start).Round(10*time.Millisecond))
	if podUID(t, ns, "orders-0") != old {
		t.Errorf("a reloadable setting restarted the pod")
	}

	// local-path cannot expand volumes: a clear condition, nothing else.
	updateDatabase(t, ns, "orders", func(d *v1alpha1.Database) {
		d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("20Gi"))}
	})
	db = waitDatabase(t, ns, "orders", time.Minute, "StorageResizePending", hasCondition(v1alpha1.ConditionStorageResizePending,
		metav1.ConditionTrue, v1alpha1.ReasonExpansionUnsupported))
	t.Logf("storage: %s", meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionStorageResizePending).Message)

	// Retain (the default) keeps the volume and the Secret; a new Database of
	// the same name starts on the kept data with the kept credentials.
	if err := cluster.Client.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the Database and its pod gone", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &v1alpha1.Database{})
		return apierrors.IsNotFound(err) && podUIDOrEmpty(ns, "orders-0") == "", nil
	})
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pgdata-orders-0"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("Retain did not keep the volume: %v", err)
	}
	createDatabase(t, ns, "orders", nil)
	waitDatabase(t, ns, "orders", 3*time.Minute, "Ready again", isReady(1, ""))
	if got := sql(t, ns, "psql", "orders-rw", "SELECT sum(v) FROM items"); got != "42" {
		t.Fatalf("the re-created Database does not see the kept data: %q", got)
	}

	// Upgrading the operator restarts no PostgreSQL pod, as a user
	// upgrades: a second release of this tree pushed to the node's
	// registry, installed over the first from there with Helm.
	before := postgresContainer(t, ns, "orders-0")
	installed := operatorImage(t)
	next := upgradeFromRegistry(t)
	// A change outside the pod template: the new operator has reconciled
	// the Database once its status shows the new generation.
	updateDatabase(t, ns, "orders", func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete })
	waitDatabase(t, ns, "orders", time.Minute, "the change seen by the new operator", func(d *v1alpha1.Database) bool {
		return d.Status.ObservedGeneration == d.Generation && isReady(1, "")(d)
	})
	time.Sleep(5 * time.Second) // a restart would show by now: the StatefulSet controller acts at once
	if after := postgresContainer(t, ns, "orders-0"); after != before {
		t.Fatalf("the operator upgrade restarted PostgreSQL: %s, then %s", before, after)
	}
	sts := &appsv1.StatefulSet{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "orders"}, sts); err != nil {
		t.Fatal(err)
	}
	if img := sts.Spec.Template.Spec.InitContainers[0].Image; img != installed {
		t.Errorf("the pod template took the new instance manager %s without a restart to carry it", img)
	}
	t.Logf("operator upgraded to %s; PostgreSQL container unchanged: %s", next, before)
	checkOrphan(t, ns, "orders", before)
}

// checkOrphan disconnects the running Database name from daytwo
// (deletionPolicy Orphan, then delete): once the garbage collector has
// acted on the deletion (a sentinel the Database owned is gone), the same
// PostgreSQL container still runs and takes writes through -rw; a new
// Database with the adopt annotation takes it back, with the data.
func checkOrphan(t *testing.T, ns, name, container string) {
	t.Helper()
	ctx := context.Background()
	db := waitDatabase(t, ns, name, time.Minute, "Ready", isReady(1, ""))
	sentinel := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-gc-sentinel",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Database", Name: name, UID: db.UID}}}}
	if err := cluster.Client.Create(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	updateDatabase(t, ns, name, func(d *v1alpha1.Database) { d.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionOrphan })
	waitDatabase(t, ns, name, time.Minute, "the Orphan policy seen", func(d *v1alpha1.Database) bool {
		return d.Status.ObservedGeneration == d.Generation
	})
	if err := cluster.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the garbage collector done with the Database", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(sentinel), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if after := postgresContainer(t, ns, name+"-0"); after != container {
		t.Fatalf("disconnecting restarted PostgreSQL: %s, then %s", container, after)
	}
	sql(t, ns, "psql", name+"-rw", "INSERT INTO items VALUES (1000)")
	t.Logf("disconnected: %s still runs and takes writes through %s-rw", container, name)
	createDatabase(t, ns, name, func(d *v1alpha1.Database) {
		d.Annotations = map[string]string{v1alpha1.AnnotationAdopt: "true"}
	})
	// The instances carry their Database's UID (the data's owner), so
	// the new Database's restarts them once, one at a time.
	waitDatabase(t, ns, name, 2*time.Minute, "Ready again, adopted", func(d *v1alpha1.Database) bool {
		return isReady(1, "")(d) && d.Status.ObservedGeneration == d.Generation && d.Status.Phase == v1alpha1.DatabasePhaseReady
	})
	if got := sql(t, ns, "psql", name+"-rw", "SELECT count(*) FROM items WHERE v = 1000"); got != "1" {
		t.Fatalf("the adopted Database lost the write made while disconnected: %q", got)
	}
}

// operatorImage is the image the operator's Deployment runs.
func operatorImage(t *testing.T) string {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: framework.OperatorNamespace, Name: "daytwo-operator"}, dep); err != nil {
		t.Fatal(err)
	}
	return dep.Spec.Template.Spec.Containers[0].Image
}

// upgradeFromRegistry releases this tree again under a new version, pushes
// it to the node's registry (hack/release.sh), and upgrades the installed
// operator to it as a user would: helm upgrade --install from the
// registry's chart, taking over what install.yaml made. It checks the CRDs
// were upgraded (each release stamps its version on them) and returns the
// new operator image once the only operator pod runs it.
func upgradeFromRegistry(t *testing.T) string {
	t.Helper()
	version := fmt.Sprintf("v0.0.1-e2e.%d", time.Now().Unix())
	root := framework.RepoRoot()
	out, err := exec.Command(filepath.Join(root, "hack", "realnode.sh"), "registry").Output()
	if err != nil {
		t.Fatal(err)
	}
	registry := strings.TrimSpace(string(out))
	release := exec.Command(filepath.Join(root, "hack", "release.sh"))
	release.Env = append(os.Environ(), "VERSION="+version, "REGISTRY="+registry, "PLATFORMS=linux/"+runtime.GOARCH, "PLUGIN=0", "RELEASE_DIST="+t.TempDir())
	if out, err := release.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh %s: %v\n%s", version, err, out)
	}
	start := time.Now()
	helm := filepath.Join(framework.CacheDir(), "addons", "helm")
	upgrade := exec.Command(helm, "upgrade", "--install", "daytwo", "oci://"+registry+"/charts/daytwo", "--version", strings.TrimPrefix(version, "v"),
		"--plain-http", "--namespace", framework.OperatorNamespace, "--take-ownership", "--wait", "--timeout", "3m")
	if out, err := upgrade.CombinedOutput(); err != nil {
		t.Fatalf("helm upgrade to %s: %v\n%s", version, err, out)
	}
	image := registry + "/daytwo:" + version
	changeOperator(t, "the operator running "+image, func(*appsv1.Deployment) {}, func(pods []corev1.Pod) bool {
		return len(pods) == 1 && pods[0].Spec.Containers[0].Image == image && podReady(pods[0]) && pods[0].DeletionTimestamp.IsZero()
	})
	if os.Getenv("DAYTWO_E2E_NAMESPACES") != "" {
		// The namespaced install's release leaves the CRDs to kubectl
		// (crds.create=false, which helm upgrade keeps).
		t.Logf("released %s to %s and upgraded the namespaced operator from the registry in %s", version, registry, time.Since(start).Round(time.Second))
		return image
	}
	for _, name := range []string{"databases.daytwo.dev", "databasebackups.daytwo.dev", "webapps.daytwo.dev"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := cluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatal(err)
		}
		if got := crd.Annotations["daytwo.dev/release"]; got != version {
			t.Errorf("CRD %s is of release %q after the upgrade to %s", name, got, version)
		}
	}
	t.Logf("released %s to %s and upgraded the operator with helm from the registry in %s", version, registry, time.Since(start).Round(time.Second))
	return image
}

// checkTLS: the psql pod verified the server (sslmode=verify-full against
// the credentials Secret's CA) for every query so far; here a plaintext
// connection is refused, the session is encrypted, and a new server
// certificate (the old Secret deleted) is served without a restart while
// verified clients keep working.
func checkTLS(t *testing.T, ns, db string) {
	t.Helper()
	host := db + "-rw." + ns + ".svc.cluster.local"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stderr, err := cluster.Exec(ctx, ns, "psql", "client", "env", "PGSSLMODE=disable", "psql", "-h", host, "-U", "app", "-d", "app", "-c", "SELECT 1")
	if err == nil || !strings.Contains(stderr, "no encryption") {
		t.Errorf("a plaintext connection was not refused: err=%v stderr=%q", err, stderr)
	}
	if got := sql(t, ns, "psql", db+"-rw", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); got != "t" {
		t.Errorf("the session is not encrypted: %q", got)
	}
	before := postgresContainer(t, ns, db+"-0")
	since := time.Now()
	if err := cluster.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db + "-server-tls"}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "the instance serving the new certificate", func(ctx context.Context) (bool, error) {
		return strings.Contains(cluster.PodLogs(ctx, ns, db+"-0", "postgres", since), "Installed a renewed TLS certificate"), nil
	})
	t.Logf("a new server certificate served %s after the old one was deleted", time.Since(since).Round(10*time.Millisecond))
	if got := sql(t, ns, "psql", db+"-rw", "SELECT 1"); got != "1" {
		t.Errorf("a verified client after the rotation: %q", got)
	}
	if after := postgresContainer(t, ns, db+"-0"); after != before {
		t.Errorf("the rotation restarted PostgreSQL: %s, then %s", before, after)
	}
}

// postgresContainer identifies the running PostgreSQL container of pod: its
// pod, container id and restart count.
func postgresContainer(t *testing.T, ns, name string) string {
	t.Helper()
	p := &corev1.Pod{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "postgres" {
			return fmt.Sprintf("pod %s container %s restarts %d", p.UID, c.ContainerID, c.RestartCount)
		}
	}
	t.Fatalf("pod %s has no postgres container", name)
	return ""
}

// setOperatorReplicas scales the operator and waits until that many run.
func setOperatorReplicas(t *testing.T, n int32) {
	t.Helper()
	changeOperator(t, fmt.Sprintf("%d operator pods", n), func(dep *appsv1.Deployment) { dep.Spec.Replicas = ptr.To(n) },
		func(pods []corev1.Pod) bool {
			ready := 0
			for _, p := range pods {
				if p.DeletionTimestamp.IsZero() && podReady(p) {
					ready++
				}
			}
			return ready == int(n) && len(pods) == int(n)
		})
}

// changeOperator patches the operator's Deployment with mutate and waits
// until its pods are done.
func changeOperator(t *testing.T, what string, mutate func(*appsv1.Deployment), done func([]corev1.Pod) bool) {
	t.Helper()
	ctx := context.Background()
	dep := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: framework.OperatorNamespace, Name: "daytwo-operator"}
	if err := cluster.Client.Get(ctx, key, dep); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(dep.DeepCopy())
	mutate(dep)
	if err := cluster.Client.Patch(ctx, dep, patch); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, what, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := cluster.Client.List(ctx, pods, client.InNamespace(framework.OperatorNamespace),
			client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
			return false, err
		}
		return done(pods.Items), nil
	})
}

// writesAfter counts the writer's acknowledged writes after at.
func writesAfter(t *testing.T, w *framework.Writer, at time.Time) int {
	n := 0
	for _, ts := range w.Read(t).Times {
		if ts.After(at) {
			n++
		}
	}
	return n
}

func podUIDOrEmpty(ns, name string) types.UID {
	p := &corev1.Pod{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil || !p.DeletionTimestamp.IsZero() {
		return ""
	}
	return p.UID
}

// A medium Database runs a primary and a streaming replica. A minor-version
// image change restarts the replica first, then the primary; an image that
// cannot run is rolled back without the primary ever being touched.
func TestDatabaseMediumUpgradeAndRollback(t *testing.T) {
	requireRealNode(t)
	ns := restrictedNamespace(t)
	start := time.Now()
	createDatabase(t, ns, "shop", func(db *v1alpha1.Database) {
		db.Spec.Size = v1alpha1.SizeMedium
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
	})
	waitDatabase(t, ns, "shop", 4*time.Minute, "Ready with 2 instances", isReady(2, postgres.DefaultImage(postgresMajor)))
	t.Logf("2 instances Ready in %s", time.Since(start).Round(10*time.Millisecond))
	// The operator asks each instance manager for its status.
	db := waitDatabase(t, ns, "shop", time.Minute, "both instances reporting", func(d *v1alpha1.Database) bool {
		s := d.Status.InstanceStatuses
		return len(s) == 2 && s[0].Role == "primary" && s[1].Role == "replica" && s[1].Streaming && s[0].LSN != ""
	})
	t.Logf("instances: %+v", db.Status.InstanceStatuses)

	psqlPod(t, ns, "psql", "shop")
	sql(t, ns, "psql", "shop-rw", "CREATE TABLE orders (id int); INSERT INTO orders SELECT generate_series(1, 1000)")
	if got := sql(t, ns, "psql", "shop-ro", "SELECT pg_is_in_recovery()"); got != "t" {
		t.Errorf("shop-ro does not reach a replica: pg_is_in_recovery = %q", got)
	}
	framework.Eventually(t, 30*time.Second, "the replica to have the rows", func(ctx context.Context) (bool, error) {
		out, _, err := cluster.Exec(ctx, ns, "psql", "client", "psql", "-h", "shop-ro."+ns+".svc.cluster.local", "-U", "app", "-d", "app", "-qtAc", "SELECT count(*) FROM orders")
		return err == nil && strings.TrimSpace(out) == "1000", nil
	})

	// Minor upgrade: the replica first, then a switchover, then the old
	// primary, while an application writes through shop-rw.
	rw := "host=shop-rw." + ns + ".svc.cluster.local user=app dbname=app connect_timeout=2"
	firstPrimary := db.Status.Primary
	writer := cluster.StartWriter(t, ns, "psql", "client", rw, "acks")
	start = time.Now()
	updateDatabase(t, ns, "shop", func(d *v1alpha1.Database) { d.Spec.Image = postgresNextImage })
	db = waitDatabase(t, ns, "shop", 4*time.Minute, "running "+postgresNextImage+" after a switchover", func(d *v1alpha1.Database) bool {
		return isReady(2, postgresNextImage)(d) && d.Status.LastSwitchover != nil
	})
	t.Logf("minor upgrade of 2 instances took %s", time.Since(start).Round(10*time.Millisecond))
	writes := writer.Stop(t)
	gap, at := writes.LongestGap()
	t.Logf("writer during the upgrade: %s (the gap began %s after the change)", writes, at.Sub(start).Round(10*time.Millisecond))
	if lost := writes.Lost(cluster.ReadIDs(t, ns, "psql", "client", rw, "acks")); len(lost) > 0 {
		t.Fatalf("acknowledged writes lost in the upgrade: %v", lost)
	}
	if gap > 10*time.Second {
		t.Errorf("no write for %s during the upgrade: a planned restart of the primary must hand over, not fail over", gap)
	}
	restarts := eventsFor(t, ns, "shop", "Restarting")
	if len(restarts) < 2 || !strings.Contains(restarts[0], "replica shop-1") || !strings.Contains(restarts[len(restarts)-1], firstPrimary) {
		t.Fatalf("rolling order: %q", restarts)
	}
	sw := db.Status.LastSwitchover
	if sw.Result != v1alpha1.SwitchoverSucceeded || sw.From != firstPrimary || !strings.Contains(sw.Message, "before restarting") {
		t.Fatalf("switchover before the primary's restart: %+v", *sw)
	}
	if db.Status.LastFailover != nil {
		t.Errorf("a planned restart failed over: %+v", *db.Status.LastFailover)
	}
	t.Logf("switchover during the upgrade: %s", sw.Message)
	if got := sql(t, ns, "psql", "shop-rw", "SELECT count(*) FROM orders"); got != "1000" {
		t.Fatalf("after the upgrade: %q", got)
	}

	// A raised restart-only setting rolls in place: postgres restarts in
	// the replica's pod, the primary hands over, and the old primary, which
	// its demotion restarted, only moves to the new revision. No pod is
	// replaced and no acknowledged write is lost.
	uids := map[string]types.UID{}
	for _, name := range []string{"shop-0", "shop-1"} {
		uids[name] = podUID(t, ns, name)
	}
	settingsPrimary := db.Status.Primary
	writer = cluster.StartWriter(t, ns, "psql", "client", rw, "acks_settings")
	start = time.Now()
	updateDatabase(t, ns, "shop", func(d *v1alpha1.Database) {
		d.Spec.Parameters = map[string]string{"max_locks_per_transaction": "128"}
	})
	db = waitDatabase(t, ns, "shop", 3*time.Minute, "the setting applied in place", func(d *v1alpha1.Database) bool {
		return isReady(2, "")(d) && hasCondition(v1alpha1.ConditionPendingRestart, metav1.ConditionFalse, v1alpha1.ReasonUpToDate)(d) &&
			hasCondition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete)(d)
	})
	t.Logf("a restart-only setting rolled over 2 instances in %s", time.Since(start).Round(10*time.Millisecond))
	writes = writer.Stop(t)
	gap, _ = writes.LongestGap()
	t.Logf("writer during the restart-only change: %s", writes)
	if lost := writes.Lost(cluster.ReadIDs(t, ns, "psql", "client", rw, "acks_settings")); len(lost) > 0 {
		t.Fatalf("acknowledged writes lost in the restart-only change: %v", lost)
	}
	if gap > 10*time.Second {
		t.Errorf("no write for %s during a restart-only change", gap)
	}
	for name, uid := range uids {
		if podUID(t, ns, name) != uid {
			t.Errorf("a restart-only setting replaced pod %s", name)
		}
	}
	rev := checkOnUpdateRevision(t, ns, "shop")
	for _, svc := range []string{"shop-rw", "shop-ro"} {
		if got := sql(t, ns, "psql", svc, "SHOW max_locks_per_transaction"); got != "128" {
			t.Errorf("max_locks_per_transaction through %s = %s", svc, got)
		}
	}
	settingsReplica := "shop-0"
	if settingsPrimary == settingsReplica {
		settingsReplica = "shop-1"
	}
	if ev := eventsFor(t, ns, "shop", "Restarting"); !slices.ContainsFunc(ev, func(m string) bool {
		return strings.Contains(m, "replica "+settingsReplica+" in place to apply revision "+rev)
	}) {
		t.Errorf("no Restarting event for the replica %s in place to %s: %q", settingsReplica, rev, ev)
	}
	if sw := db.Status.LastSwitchover; sw == nil || sw.From != settingsPrimary || sw.Result != v1alpha1.SwitchoverSucceeded || db.Status.Primary == settingsPrimary {
		t.Errorf("the primary %s did not hand over before its restart: %+v", settingsPrimary, sw)
	}

	// A broken image is rolled back; the primary keeps running throughout.
	primaryName := db.Status.Primary
	primary := podUID(t, ns, primaryName)
	start = time.Now()
	updateDatabase(t, ns, "shop", func(d *v1alpha1.Database) { d.Spec.Image = postgresMissingImage })
	db = waitDatabase(t, ns, "shop", 4*time.Minute, "rolled back", func(d *v1alpha1.Database) bool {
		return hasCondition(v1alpha1.ConditionUpgradeFailed, metav1.ConditionTrue, v1alpha1.ReasonRolledBack)(d) &&
			d.Status.FailedImage == postgresMissingImage && d.Status.ReadyInstances == 2 && d.Status.CurrentImage == postgresNextImage
	})
	t.Logf("broken image rolled back in %s: %s", time.Since(start).Round(10*time.Millisecond),
		meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionUpgradeFailed).Message)
	if podUID(t, ns, primaryName) != primary {
		t.Fatal("the primary was restarted during a failing upgrade")
	}
	if ev := eventsFor(t, ns, "shop", v1alpha1.ReasonRolledBack); len(ev) == 0 {
		t.Error("no RolledBack event")
	}

	// Failover: the primary's pod is deleted. The other instance takes the
	// lease and -rw writes again; the deleted one comes back as a replica.
	before := start
	start = time.Now()
	failoverStatuses := cluster.WatchStatuses(t, ns, "shop")
	if err := cluster.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: primaryName}}); err != nil {
		t.Fatal(err)
	}
	writeUntilAccepted(t, ns, "psql", "shop-rw", "INSERT INTO orders VALUES (1001)")
	t.Logf("writes again %s after deleting the primary %s", time.Since(start).Round(10*time.Millisecond), primaryName)
	db = waitDatabase(t, ns, "shop", 3*time.Minute, "failed over and whole again", func(d *v1alpha1.Database) bool {
		f := d.Status.LastFailover
		// Ready, not phase Ready: the refused image keeps the phase Degraded.
		return f != nil && f.DetectedTime.After(before) && f.From == primaryName && d.Status.Primary == f.To &&
			d.Status.Ready && d.Status.ReadyInstances == 2
	})
	t.Logf("failover: %+v; both instances ready %s after the deletion", *db.Status.LastFailover, time.Since(start).Round(10*time.Millisecond))
	if !sawTarget(failoverStatuses(), db.Status.LastFailover.To, v1alpha1.ConditionReady, v1alpha1.ReasonFailingOver) {
		t.Errorf("no status showed targetPrimary %s and Ready/%s during the failover", db.Status.LastFailover.To, v1alpha1.ReasonFailingOver)
	}
	if got := sql(t, ns, "psql", "shop-rw", "SELECT count(*) FROM orders"); got != "1001" {
		t.Fatalf("after the failover: %q rows, want 1001", got)
	}
	framework.Eventually(t, time.Minute, "the rejoined replica to have every row", func(ctx context.Context) (bool, error) {
		out, _, err := cluster.Exec(ctx, ns, "psql", "client", "psql", "-h", "shop-ro."+ns+".svc.cluster.local", "-U", "app", "-d", "app",
			"-qtAc", "SELECT count(*) FROM orders")
		return err == nil && strings.TrimSpace(out) == "1001", nil
	})
	if ev := eventsFor(t, ns, "shop", v1alpha1.ReasonFailover); len(ev) < 2 {
		t.Errorf("Failover events: %q", ev)
	}

	// Switchover back to the instance that was deleted, by annotation: the
	// primary steps down cleanly and no row is lost. An app on the
	// Database is in the middle of a canary meanwhile: it pauses.
	front, windowEnd, frontPods := startCanaryOn(t, ns, "shop")
	frontStatuses := cluster.WatchWebAppStatuses(t, ns, front.Name)
	requested := time.Now().UTC().Truncate(time.Second)
	start = time.Now()
	statuses := cluster.WatchStatuses(t, ns, "shop")
	updateDatabase(t, ns, "shop", func(d *v1alpha1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationSwitchoverRequested] = requested.Format(time.RFC3339)
		d.Annotations[v1alpha1.AnnotationSwitchoverTo] = primaryName
	})
	db = waitDatabase(t, ns, "shop", 2*time.Minute, "the switchover answered", func(d *v1alpha1.Database) bool {
		s := d.Status.LastSwitchover
		return s != nil && s.RequestedTime.Equal(&metav1.Time{Time: requested})
	})
	sw = db.Status.LastSwitchover
	if sw.Result != v1alpha1.SwitchoverSucceeded || sw.To != primaryName || sw.PromotedTime == nil {
		t.Fatalf("switchover: %+v", *sw)
	}
	t.Logf("switchover to %s: demote and promote took %s (%s)", primaryName, sw.PromotedTime.Sub(sw.StartedTime.Time), sw.Message)
	checkCanaryHeld(t, front, frontStatuses, windowEnd, frontPods, primaryName)
	// While it was under way the status said so: the target named, and a
	// condition, before the old primary stepped down.
	if !sawTarget(statuses(), primaryName, v1alpha1.ConditionProgressing, v1alpha1.ReasonSwitchingOver) {
		t.Errorf("no status showed targetPrimary %s and Progressing/%s during the switchover", primaryName, v1alpha1.ReasonSwitchingOver)
	}
	framework.Eventually(t, time.Minute, "a write through shop-rw after the switchover", func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, _, err := cluster.Exec(ctx, ns, "psql", "client", "psql",
			"host=shop-rw."+ns+".svc.cluster.local user=app dbname=app connect_timeout=2", "-qtAc", "INSERT INTO orders VALUES (1002)")
		return err == nil, nil
	})
	t.Logf("writes again %s after the switchover was requested", time.Since(start).Round(10*time.Millisecond))
	if got := sql(t, ns, "psql", "shop-rw", "SELECT count(*) || ':' || bool_and(NOT pg_is_in_recovery()) FROM orders"); got != "1002:true" {
		t.Fatalf("after the switchover: %q, want 1002 rows on a primary", got)
	}
	waitDatabase(t, ns, "shop", 3*time.Minute, "whole again with the named primary", func(d *v1alpha1.Database) bool {
		return d.Status.Primary == primaryName && d.Status.TargetPrimary == "" && d.Status.Ready && d.Status.ReadyInstances == 2
	})
	if ev := eventsFor(t, ns, "shop", v1alpha1.ReasonSwitchover); len(ev) < 2 {
		t.Errorf("Switchover events: %q", ev)
	}

	// A drain: the primary's eviction is refused while it is the primary,
	// and with its node cordoned the operator looks for a replica on another
	// node to switch over to. The real node is the only node, so it waits
	// and says why.
	node := &corev1.Node{}
	pod := &corev1.Pod{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: db.Status.Primary}, pod); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	cordon := func(on bool) {
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = on
		if err := cluster.Client.Patch(context.Background(), node, patch); err != nil {
			t.Fatal(err)
		}
	}
	cordon(true)
	t.Cleanup(func() { // the node is the cluster's only one: never left cordoned
		if node.Spec.Unschedulable {
			cordon(false)
		}
	})
	evict := func(name string) error { // a dry run: the budgets are checked, nothing is evicted
		return cluster.Client.SubResource("eviction").Create(context.Background(),
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.DryRunAll)
	}
	evictErr := evict(pod.Name)
	replica := "shop-0"
	if pod.Name == replica {
		replica = "shop-1"
	}
	// The replica may still be rejoining after the switchover above, and
	// the disruption controller counts it healthy a moment after it is
	// ready: a drain retries an eviction the budget refuses, and so does
	// this check.
	framework.Eventually(t, time.Minute, "a drain may evict the replica "+replica, func(context.Context) (bool, error) {
		err := evict(replica)
		if err != nil && !apierrors.IsTooManyRequests(err) {
			return false, err
		}
		return err == nil, nil
	})
	db = waitDatabase(t, ns, "shop", time.Minute, "waiting to move the primary off its cordoned node", func(d *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonSwitchoverPending && strings.Contains(c.Message, "is cordoned")
	})
	cordon(false)
	if !apierrors.IsTooManyRequests(evictErr) {
		t.Fatalf("evicting the primary: %v, want 429 (its disruption budget)", evictErr)
	}
	t.Logf("drain: %s", meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionProgressing).Message)
	waitDatabase(t, ns, "shop", time.Minute, "no longer waiting after the uncordon", func(d *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionProgressing)
		return c == nil || c.Reason != v1alpha1.ReasonSwitchoverPending
	})

	// A frozen primary (every process stopped, as on a hung server) with
	// the operator scaled to 0: nothing is promoted and nothing splits. The
	// frozen primary's lease runs out; once the operator is back it fails
	// over, writes come back, and the thawed old primary rejoins. The
	// writer's every acknowledged write survives.
	frozen := db.Status.Primary
	setOperatorReplicas(t, 0)
	t.Cleanup(func() { setOperatorReplicas(t, 1) })
	writer = cluster.StartWriter(t, ns, "psql", "client", rw, "acks2")
	time.Sleep(2 * time.Second)
	thaw := cluster.Freeze(t, ns, frozen, "postgres")
	t.Cleanup(thaw) // a frozen container could not even be stopped
	frozenAt := time.Now()
	time.Sleep(15 * time.Second) // twice the lease
	lease := &coordinationv1.Lease{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "shop-primary"}, lease); err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != frozen {
		t.Fatalf("with the operator down, the lease moved from %s to %s", frozen, h)
	}
	// A write in flight at the freeze may be stamped just after it: each
	// attempt is capped at 0.5 s.
	if got := writesAfter(t, writer, frozenAt.Add(time.Second)); got > 0 {
		t.Fatalf("%d writes acknowledged while the primary was frozen and the operator down", got)
	}
	back := time.Now()
	setOperatorReplicas(t, 1)
	db = waitDatabase(t, ns, "shop", 2*time.Minute, "failed over from the frozen primary", func(d *v1alpha1.Database) bool {
		f := d.Status.LastFailover
		return f != nil && f.From == frozen && f.PromotedTime != nil && f.DetectedTime.After(frozenAt)
	})
	// The frozen primary could not write past its last renewal's end, less
	// the fence margin: before the operator came back.
	if f := db.Status.LastFailover; f.FencedTime == nil || f.FencedTime.After(back) || f.FencedTime.Before(&metav1.Time{Time: frozenAt.Add(-time.Second)}) {
		t.Errorf("fenced at %v: want between the freeze (%s) and the operator's return (%s)", f.FencedTime, frozenAt, back)
	}
	t.Logf("failover from the frozen primary: promoted %s after the operator's return (%+v)",
		db.Status.LastFailover.PromotedTime.Sub(back).Round(10*time.Millisecond), *db.Status.LastFailover)
	framework.Eventually(t, time.Minute, "writes through shop-rw again", func(context.Context) (bool, error) {
		return writesAfter(t, writer, back) > 0, nil
	})
	thaw()
	waitDatabase(t, ns, "shop", 3*time.Minute, "the thawed primary rejoined", func(d *v1alpha1.Database) bool {
		return d.Status.Ready && d.Status.ReadyInstances == 2 && d.Status.Primary != frozen
	})
	writes2 := writer.Stop(t)
	if lost := writes2.Lost(cluster.ReadIDs(t, ns, "psql", "client", rw, "acks2")); len(lost) > 0 {
		t.Fatalf("acknowledged writes lost to the frozen primary: %v", lost)
	}
	t.Logf("writer through the freeze: %s", writes2)
	checkFencing(t, ns, "shop")
	checkHibernation(t, ns, "shop", "SELECT count(*) FROM orders")

	// Delete removes the volumes too.
	if err := cluster.Client.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the volumes deleted", func(ctx context.Context) (bool, error) {
		list := &corev1.PersistentVolumeClaimList{}
		if err := cluster.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
}

// checkAppVerifiesDatabase: a WebApp with a databaseRef gets DATABASE_URL,
// the CA and PGSSLMODE/PGSSLROOTCERT, and its app (pgx, no TLS code of its
// own) connects with the server verified; it is Ready only if it does. The
// app connects as a read-only role of spec.roles, through that role's
// Secret (databaseRef.role), which reads and cannot write.
func checkAppVerifiesDatabase(t *testing.T, ns, db string) {
	t.Helper()
	updateDatabase(t, ns, db, func(d *v1alpha1.Database) {
		// pg_read_all_stats: the app reads its own backend's pg_stat_ssl
		// row as the twin login too (its session user).
		d.Spec.Roles = []v1alpha1.DatabaseRole{{Name: "shop_reader", Login: true, InRoles: []string{"pg_read_all_data", "pg_read_all_stats"},
			PasswordRotation: &v1alpha1.PasswordRotation{Schedule: "0 4 1 1 *"}}, {Name: "stock"}}
		d.Spec.Pooler = &v1alpha1.PoolerSpec{Instances: ptr.To[int32](1)}
		d.Spec.Databases = []v1alpha1.LogicalDatabase{
			// pgvector in a schema of its own.
			{Name: "app", Extensions: []v1alpha1.DatabaseExtension{{Name: "pg_trgm"}, {Name: "vector", Schema: "vectors"}}},
			{Name: "inventory", Owner: "stock", Schemas: []v1alpha1.DatabaseSchema{{Name: "levels"}}},
		}
	})
	waitDatabase(t, ns, db, 2*time.Minute, "the roles, databases and pooler ready", func(d *v1alpha1.Database) bool {
		return hasCondition(v1alpha1.ConditionRolesReconciled, metav1.ConditionTrue, v1alpha1.ReasonRolesApplied)(d) &&
			hasCondition(v1alpha1.ConditionDatabasesReconciled, metav1.ConditionTrue, v1alpha1.ReasonDatabasesApplied)(d) &&
			hasCondition(v1alpha1.ConditionPoolerReady, metav1.ConditionTrue, v1alpha1.ReasonPoolerReady)(d)
	})
	role := &corev1.Secret{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: db + "-role-shop-reader"}, role); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	asReader := func(query string) (string, string, error) {
		return cluster.Exec(ctx, ns, "psql", "client", "env", "PGPASSWORD="+string(role.Data["password"]), "psql", "-qtA",
			"-h", db+"-rw."+ns+".svc.cluster.local", "-U", "shop_reader", "-d", "app", "-c", query)
	}
	if out, stderr, err := asReader("SELECT sum(v) || ':' || similarity('daytwo', 'daytwo') FROM items"); err != nil || strings.TrimSpace(out) != "42:1" {
		t.Errorf("the read-only role read %q (the sum, and pg_trgm at work): %v %s", out, err, stderr)
	}
	if out, stderr, err := asReader("SELECT '[1,2,3]'::vectors.vector OPERATOR(vectors.<->) '[1,2,5]'::vectors.vector"); err != nil || strings.TrimSpace(out) != "2" {
		t.Errorf("pgvector's distance read %q, want 2: %v %s", out, err, stderr)
	}
	if _, stderr, err := asReader("INSERT INTO items VALUES (1)"); err == nil || !strings.Contains(stderr, "permission denied") {
		t.Errorf("the read-only role wrote, or failed otherwise: %v %s", err, stderr)
	}
	// A change by hand, as the superuser in the pod, is put back within a
	// refresh, with a RoleDrift event.
	asSuperuser := func(query string) string {
		out, stderr, err := cluster.Exec(ctx, ns, db+"-0", "postgres", "psql", "-qtA", "-h", instanceapi.RunDir, "-U", "postgres", "-d", "postgres", "-c", query)
		if err != nil {
			t.Fatalf("psql as the superuser: %v: %s", err, stderr)
		}
		return strings.TrimSpace(out)
	}
	asSuperuser("ALTER ROLE shop_reader CONNECTION LIMIT 3")
	framework.Eventually(t, time.Minute, "the drift put back", func(context.Context) (bool, error) {
		return asSuperuser("SELECT rolconnlimit FROM pg_roles WHERE rolname = 'shop_reader'") == "-1" && len(eventsFor(t, ns, db, "RoleDrift")) > 0, nil
	})
	if got := asSuperuser("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'inventory'"); got != "stock" {
		t.Errorf("database inventory is owned by %q, want stock", got)
	}
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec: v1alpha1.WebAppSpec{
			Image: e2eClientImage, ImagePullPolicy: corev1.PullNever, Port: 8080, Replicas: ptr.To[int32](1),
			Args: []string{"pg-app", "DATABASE_URL", "SELECT ssl::text || ':' || current_user || ':' || session_user FROM pg_stat_ssl WHERE pid = pg_backend_pid()"},
			// Through the pool: TLS verified against the pool's certificate,
			// the role's verifier looked up by PgBouncer.
			DatabaseRef: &v1alpha1.WebAppDatabaseRef{Name: db, Role: "shop_reader", Pooler: true},
		},
	}
	if err := cluster.Client.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	waitApp(t, app, 2*time.Minute, "Ready with a verified database connection", readyWith(1, e2eClientImage))
	out := cluster.RunToCompletion(t, e2eClient(ns, "ask-shop", []string{"http", app.Status.URL + "/", "1"}), 2*time.Minute)
	if strings.TrimSpace(out) != "true:shop_reader:shop_reader" {
		t.Errorf("the app's connection: %q, want an encrypted one as shop_reader", out)
	}
	checkRotationUnderLoad(t, ns, db, app, asReader)
	if err := cluster.Client.Delete(context.Background(), app); err != nil {
		t.Fatal(err)
	}

	// Without spec.pooler the pool goes.
	updateDatabase(t, ns, db, func(d *v1alpha1.Database) { d.Spec.Pooler = nil })
	framework.Eventually(t, time.Minute, "the pool removed", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db + "-pooler-rw"}, &corev1.Service{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	// Declared Absent, the role is dropped, then its Secret deleted.
	updateDatabase(t, ns, db, func(d *v1alpha1.Database) {
		d.Spec.Roles[0] = v1alpha1.DatabaseRole{Name: "shop_reader", Ensure: v1alpha1.RoleEnsureAbsent}
	})
	waitDatabase(t, ns, db, time.Minute, "the role dropped", func(d *v1alpha1.Database) bool {
		return len(d.Status.Roles) == 2 && d.Status.Roles[0].State == v1alpha1.RoleDropped
	})
	framework.Eventually(t, time.Minute, "the dropped role's Secret deleted", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db + "-role-shop-reader"}, &corev1.Secret{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if got := asSuperuser("SELECT count(*) FROM pg_roles WHERE rolname IN ('shop_reader', 'shop_reader_alt')"); got != "0" {
		t.Errorf("the role declared Absent, or its rotation twin, is still there")
	}
}

// checkRotationUnderLoad rotates shop_reader's password while the app,
// which opens a connection for every request, answers a request every
// 100 ms: none may fail. The Secret moves to the twin login, the app rolls
// onto it (it logs in as shop_reader_alt, acting as shop_reader), and the
// previous password still works within the grace period. (The grace
// period's end is the instance manager's test's:
// TestDeclaredRolesAreMadeKeptAndDropped.)
func checkRotationUnderLoad(t *testing.T, ns, db string, app *v1alpha1.WebApp, asReader func(string) (string, string, error)) {
	t.Helper()
	svc := &corev1.Service{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(app), svc); err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))) + "/"
	load := framework.StartHTTPLoad(url, 100*time.Millisecond)
	defer func() {
		if ok, failures := load.Stop(); t.Failed() {
			t.Logf("the app's answers: %d succeeded, the last %q; %d failures, the first: %q", ok, load.Last(), len(failures), failures[:min(5, len(failures))])
			pods := &corev1.PodList{}
			_ = cluster.Client.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"daytwo.dev/webapp": app.Name})
			for _, p := range pods.Items {
				resp, err := http.Get("http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(app.Spec.Port))) + "/")
				if err != nil {
					t.Logf("pod %s: %v", p.Name, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				t.Logf("pod %s answers %s: %s", p.Name, resp.Status, b)
			}
		}
	}()
	updateDatabase(t, ns, db, func(d *v1alpha1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationRotatePrefix+"shop_reader"] = time.Now().UTC().Format(time.RFC3339)
	})
	waitDatabase(t, ns, db, time.Minute, "the rotation recorded", func(d *v1alpha1.Database) bool {
		return len(d.Status.Roles) > 0 && d.Status.Roles[0].LastRotationTime != nil && d.Status.Roles[0].NextRotationTime != nil
	})
	framework.Eventually(t, 2*time.Minute, "the app answering as the twin login", func(context.Context) (bool, error) {
		return load.Last() == "true:shop_reader:shop_reader_alt", nil
	})
	waitApp(t, app, 2*time.Minute, "Ready after the roll", readyWith(1, e2eClientImage))
	// A rotation and roll can take under 2 s: the load goes on until it
	// has answered enough requests to say something.
	framework.Eventually(t, time.Minute, "20 requests answered", func(context.Context) (bool, error) { return load.Succeeded() >= 20, nil })
	ok, failures := load.Stop()
	if len(failures) > 0 || ok < 20 {
		t.Errorf("during the rotation %d requests succeeded and %d failed: %q", ok, len(failures), failures)
	}
	if _, stderr, err := asReader("SELECT 1"); err != nil {
		t.Errorf("the previous password stopped working within its grace period: %v %s", err, stderr)
	}
	events := eventsFor(t, ns, db, "PasswordRotated")
	if len(events) == 0 {
		t.Error("no PasswordRotated event")
	}
}

// checkOnUpdateRevision fails unless every pod of db's StatefulSet carries
// its update revision, and the StatefulSet counts them all updated. It
// returns the revision. (With OnDelete, status.currentRevision never moves:
// kubernetes#106055.)
func checkOnUpdateRevision(t *testing.T, ns, db string) string {
	t.Helper()
	var rev string
	framework.Eventually(t, 30*time.Second, "every pod on the update revision", func(ctx context.Context) (bool, error) {
		sts := &appsv1.StatefulSet{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, sts); err != nil {
			return false, err
		}
		pods := &corev1.PodList{}
		if err := cluster.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"daytwo.dev/database": db}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
				return false, nil
			}
		}
		rev = sts.Status.UpdateRevision
		return len(pods.Items) > 0 && sts.Status.UpdatedReplicas == *sts.Spec.Replicas, nil
	})
	return rev
}

// checkFencing fences a Database's replica on request: PostgreSQL stops
// there and stays stopped while its pod runs on (its data can be read in
// it), the primary goes on serving, and the condition says so; lifted,
// the replica starts again and catches up with what was written meanwhile.
func checkFencing(t *testing.T, ns, name string) {
	t.Helper()
	db := waitDatabase(t, ns, name, 2*time.Minute, "Ready before fencing", func(d *v1alpha1.Database) bool {
		return d.Status.Ready && d.Status.ReadyInstances == 2
	})
	replica := name + "-0"
	if db.Status.Primary == replica {
		replica = name + "-1"
	}
	updateDatabase(t, ns, name, func(d *v1alpha1.Database) { d.Spec.FencedInstances = []string{replica} })
	db = waitDatabase(t, ns, name, time.Minute, replica+" fenced", func(d *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionFenced)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, replica) && d.Status.ReadyInstances == 1
	})
	t.Logf("fenced: %s", meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionFenced).Message)
	if out := cluster.ExecOK(t, ns, replica, "postgres", "ls", instanceapi.PGData); !strings.Contains(out, "PG_VERSION") {
		t.Fatalf("the fenced instance's data directory cannot be read in its pod: %q", out)
	}
	if out, _, err := cluster.Exec(context.Background(), ns, replica, "postgres", "pg_isready", "-h", instanceapi.RunDir, "-p", strconv.Itoa(instanceapi.PostgresPort)); err == nil {
		t.Fatalf("PostgreSQL answers in the fenced instance: %s", out)
	}
	// Ready in the kubelet's sense, so the StatefulSet goes on with the
	// other ordinals, and out of -ro by its role label.
	cluster.WaitPodReady(t, ns, replica, time.Minute)
	checkFencedPod := func() {
		t.Helper()
		pod, err := cluster.Kube.CoreV1().Pods(ns).Get(context.Background(), replica, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if role := pod.Labels["daytwo.dev/role"]; role != "fenced" {
			t.Fatalf("the fenced pod's role label is %q", role)
		}
	}
	checkFencedPod()
	// A new pod keeps the fence: the data volume holds it.
	if err := cluster.Kube.CoreV1().Pods(ns).Delete(context.Background(), replica, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, replica+" back, still fenced", func(ctx context.Context) (bool, error) {
		pod, err := cluster.Kube.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
		if err != nil || !pod.DeletionTimestamp.IsZero() || !podReady(*pod) {
			return false, nil
		}
		_, _, err = cluster.Exec(ctx, ns, replica, "postgres", "pg_isready", "-h", instanceapi.RunDir, "-p", strconv.Itoa(instanceapi.PostgresPort))
		return err != nil, nil
	})
	checkFencedPod()
	sql(t, ns, "psql", name+"-rw", "CREATE TABLE written_while_fenced (id int); INSERT INTO written_while_fenced VALUES (1)")
	updateDatabase(t, ns, name, func(d *v1alpha1.Database) { d.Spec.FencedInstances = nil })
	waitDatabase(t, ns, name, 2*time.Minute, "the fence lifted", func(d *v1alpha1.Database) bool {
		return d.Status.Ready && d.Status.ReadyInstances == 2 && meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionFenced) == nil
	})
	framework.Eventually(t, time.Minute, replica+" catching up", func(context.Context) (bool, error) {
		return slices.Contains(replicaIDsOf(t, ns, replica, "written_while_fenced"), 1), nil
	})
	sql(t, ns, "psql", name+"-rw", "DROP TABLE written_while_fenced")
}

// checkHibernation hibernates a Database of two instances whose primary
// is not the first (it moves there first, so the instances wake in order),
// checks that no instance runs and every volume is kept, wakes it and
// checks the data (query's answer) came back with it.
func checkHibernation(t *testing.T, ns, name, query string) {
	t.Helper()
	before := sql(t, ns, "psql", name+"-rw", query)
	db := waitDatabase(t, ns, name, 2*time.Minute, "Ready before hibernating", func(d *v1alpha1.Database) bool {
		return d.Status.Ready && d.Status.ReadyInstances == 2
	})
	if db.Status.Primary == name+"-0" {
		// The path worth proving: the primary elsewhere than the first.
		requested := time.Now().UTC().Truncate(time.Second)
		updateDatabase(t, ns, name, func(d *v1alpha1.Database) {
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			d.Annotations[v1alpha1.AnnotationSwitchoverRequested] = requested.Format(time.RFC3339)
			d.Annotations[v1alpha1.AnnotationSwitchoverTo] = name + "-1"
		})
		waitDatabase(t, ns, name, 2*time.Minute, "the primary on "+name+"-1", func(d *v1alpha1.Database) bool {
			s := d.Status.LastSwitchover
			return s != nil && s.RequestedTime.Equal(&metav1.Time{Time: requested}) && d.Status.Primary == name+"-1" && d.Status.Ready
		})
	}
	start := time.Now()
	t.Log(plugin(t, ns, "hibernate", name))
	db = waitDatabase(t, ns, name, 3*time.Minute, "hibernated", func(d *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonHibernated
	})
	pods, claims := &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}
	sel := client.MatchingLabels{"daytwo.dev/database": name}
	if err := cluster.Client.List(context.Background(), pods, client.InNamespace(ns), sel); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.List(context.Background(), claims, client.InNamespace(ns), sel); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 || len(claims.Items) != 2 || db.Status.Phase != v1alpha1.DatabasePhaseHibernated {
		t.Fatalf("hibernated: %d pods, %d volumes, phase %s", len(pods.Items), len(claims.Items), db.Status.Phase)
	}
	t.Logf("hibernated in %s: %s", time.Since(start).Round(100*time.Millisecond),
		meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady).Message)
	start = time.Now()
	t.Log(plugin(t, ns, "wake", name))
	waitDatabase(t, ns, name, 4*time.Minute, "awake with both instances", func(d *v1alpha1.Database) bool {
		return d.Status.Ready && d.Status.ReadyInstances == 2 && d.Status.Primary == name+"-0"
	})
	t.Logf("awake in %s", time.Since(start).Round(100*time.Millisecond))
	if after := sql(t, ns, "psql", name+"-rw", query); after != before {
		t.Fatalf("after hibernation: %q, before: %q", after, before)
	}
}
