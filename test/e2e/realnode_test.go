//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// postgresMajor is the PostgreSQL the suites run; hack/images.sh builds
// 15, 17 and 18.
const postgresMajor = "17"

// Images the real-node suites run; hack/images.sh builds them.
const (
	demoWebImage   = "localhost/daytwo-demo-web:dev"
	demoWebImageV2 = "localhost/daytwo-demo-web:v2"
	postgresImage  = "docker.io/library/postgres:" + postgresMajor
	minioImage     = "localhost/minio:dev"
	e2eClientImage = "localhost/daytwo-e2e-client:dev"
)

// requireRealNode skips a suite that needs processes to run. kwok nodes only
// simulate pods; CI runs these suites on the real node.
func requireRealNode(t *testing.T) {
	t.Helper()
	if cluster.Mode != framework.ModeReal {
		t.Skip("needs the real node (DAYTWO_E2E_MODE=real): kwok nodes run no containers")
	}
}

// serve creates a Deployment and a ClusterIP Service of the same name and
// waits until every replica is available.
func serve(t *testing.T, ns, name string, replicas int32, port int32, pod corev1.PodSpec) {
	t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}
	for _, obj := range []client.Object{dep, svc} {
		if err := cluster.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	framework.Eventually(t, 3*time.Minute, fmt.Sprintf("%d available replicas of %s", replicas, name), func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return false, err
		}
		return dep.Status.AvailableReplicas == replicas, nil
	})
	waitEndpoints(t, ns, name, replicas)
	t.Logf("%s: %d replicas available and behind the Service in %s", name, replicas, time.Since(start).Round(10*time.Millisecond))
}

// waitEndpoints waits until Service name has n ready endpoints: available pods
// reach the Service a moment after they become ready, through EndpointSlices.
func waitEndpoints(t *testing.T, ns, name string, n int32) {
	t.Helper()
	framework.Eventually(t, time.Minute, fmt.Sprintf("%d ready endpoints of Service %s", n, name), func(ctx context.Context) (bool, error) {
		slices := &discoveryv1.EndpointSliceList{}
		if err := cluster.Client.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
			return false, err
		}
		ready := int32(0)
		for _, sl := range slices.Items {
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == n, nil
	})
}

func secret(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	if err := cluster.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func fromSecret(env, secretName, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: key}}}
}

// e2eClient is a pod running the e2e-client image with args.
func e2eClient(ns, name string, args []string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SecurityContext: framework.RestrictedPod(),
			Containers: []corev1.Container{{
				Name: "client", Image: e2eClientImage, ImagePullPolicy: corev1.PullNever,
				Args: args, Env: env, SecurityContext: framework.RestrictedContainer(),
			}},
		},
	}
}

// The stock-contract PostgreSQL image, started by hand, answers psql through
// a Service with scram-sha-256, and refuses a wrong password.
// pgSecurity runs the stock-contract image as its postgres user (999).
var pgSecurity = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), RunAsNonRoot: ptr.To(true),
	SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}

// plainPostgres serves image, started by hand as a user would (no daytwo),
// behind Service name: superuser postgres with the password in Secret
// name's key password, and database db.
func plainPostgres(t *testing.T, ns, name, image, db string) {
	t.Helper()
	serve(t, ns, name, 1, 5432, corev1.PodSpec{
		SecurityContext: pgSecurity,
		Containers: []corev1.Container{{
			Name: "postgres", Image: image, ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{fromSecret("POSTGRES_PASSWORD", name, "password"), {Name: "POSTGRES_DB", Value: db},
				{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"}},
			Ports:           []corev1.ContainerPort{{ContainerPort: 5432}},
			ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"pg_isready", "-h", "127.0.0.1"}}}, PeriodSeconds: 1},
			VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql/data"}},
			SecurityContext: framework.RestrictedContainer(),
		}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	})
}

func TestRealNodeRunsPostgreSQL(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	secret(t, ns, "pg", map[string]string{"password": "e2e-" + ns})
	plainPostgres(t, ns, "pg", postgresImage, "app")
	client := framework.ClientPod(ns, "psql", postgresImage, fromSecret("PGPASSWORD", "pg", "password"))
	client.Spec.SecurityContext = pgSecurity
	cluster.RunPod(t, client)
	host := fmt.Sprintf("pg.%s.svc.cluster.local", ns)
	out := cluster.PSQL(t, ns, "psql", "client", host, "postgres", "app",
		"CREATE TABLE t (v int); INSERT INTO t VALUES (40), (2); SELECT sum(v) FROM t")
	if strings.TrimSpace(out) != "42" {
		t.Errorf("psql through the Service answered %q, want 42", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stderr, err := cluster.Exec(ctx, ns, "psql", "client", "env", "PGPASSWORD=wrong", "psql", "-h", host, "-U", "postgres", "-d", "app", "-c", "SELECT 1")
	if err == nil || !strings.Contains(stderr, "password authentication failed") {
		t.Errorf("a wrong password was not refused: err=%v stderr=%q", err, stderr)
	}
}

// MinIO, built from the module proxy, answers an S3 PUT and GET from a pod.
func TestRealNodeRunsMinIO(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := cluster.Namespace(t)
	minioInCluster(t, ns)
	pod := e2eClient(ns, "s3-client", []string{"s3", fmt.Sprintf("minio.%s.svc.cluster.local:9000", ns), "e2e"},
		fromSecret("AWS_ACCESS_KEY_ID", "s3", "AWS_ACCESS_KEY_ID"), fromSecret("AWS_SECRET_ACCESS_KEY", "s3", "AWS_SECRET_ACCESS_KEY"))
	out := cluster.RunToCompletion(t, pod, 2*time.Minute)
	if !strings.Contains(out, "s3 round trip ok: 1048576 bytes") {
		t.Errorf("s3 client said %q", out)
	}
}
