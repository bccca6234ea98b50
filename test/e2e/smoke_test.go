//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

func TestCRDsAreInstalledAndEstablished(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"webapps.daytwo.dev", "databases.daytwo.dev", "databasebackups.daytwo.dev"} {
		framework.Eventually(t, 30*time.Second, name+" Established", func(ctx context.Context) (bool, error) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := cluster.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, nil
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

func TestSamplesAreAcceptedAndReconciled(t *testing.T) {
	t.Parallel()
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 550)
	for _, f := range []string{"webapp.yaml", "database.yaml", "databasebackup.yaml"} {
		cluster.ApplyFile(t, ns, filepath.Join(framework.RepoRoot(), "config", "samples", f))
	}
	objs := []client.Object{
		&v1alpha1.WebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"}},
		&v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}},
		&v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-nightly"}},
	}
	for _, obj := range objs {
		framework.Eventually(t, 30*time.Second, "a Ready condition on "+obj.GetName(), func(ctx context.Context) (bool, error) {
			if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return false, err
			}
			return meta.FindStatusCondition(conditionsOf(obj), v1alpha1.ConditionReady) != nil, nil
		})
	}
}

func conditionsOf(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *v1alpha1.WebApp:
		return o.Status.Conditions
	case *v1alpha1.Database:
		return o.Status.Conditions
	case *v1alpha1.DatabaseBackup:
		return o.Status.Conditions
	}
	return nil
}

// The cluster's own controllers and scheduler work: a Deployment reaches its
// replica count on the cluster's nodes (simulated ones in kwok mode).
func TestControlPlaneRunsADeployment(t *testing.T) {
	t.Parallel()
	ns := cluster.Namespace(t)
	cluster.ReserveCPU(t, ns, 100)
	labels := map[string]string{"app": "smoke"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "smoke"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "pause", Image: framework.PauseImage, ImagePullPolicy: corev1.PullIfNotPresent,
				}}},
			},
		},
	}
	if err := cluster.Client.Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "3 available replicas", func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return false, err
		}
		return dep.Status.AvailableReplicas == 3, nil
	})
}

// Every sample of config/samples, one per feature, is applied as it is
// (each in a namespace of its own) and reconciled: its status observes its
// spec and has a Ready condition, and daytwo finds nothing wrong with the
// spec itself. A sample may wait for what it names and a user brings (the
// S3 Secret, a certificate, a backup to restore, a server to import):
// that is Ready=False with another reason. kwok only: there no pod runs,
// so eleven samples cost seconds; the real node runs the three above, and
// the suites every feature.
func TestEverySampleIsReconciled(t *testing.T) {
	if cluster.Mode != framework.ModeKwok {
		t.Skip("applies every sample on kwok nodes, where CI runs it; the real node's suites run each feature")
	}
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		ns := cluster.Namespace(t)
		for _, u := range cluster.ApplyFile(t, ns, f) {
			applied++
			framework.Eventually(t, time.Minute, filepath.Base(f)+": "+u.GetKind()+" "+u.GetName()+" reconciled", func(ctx context.Context) (bool, error) {
				live := u.DeepCopy()
				if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
					return false, err
				}
				observed, _, _ := unstructured.NestedInt64(live.Object, "status", "observedGeneration")
				conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
				for _, c := range conds {
					c, _ := c.(map[string]any)
					if c["type"] == v1alpha1.ConditionReady {
						if c["reason"] == v1alpha1.ReasonInvalidSpec {
							return false, fmt.Errorf("%s: %v", f, c["message"])
						}
						return observed == live.GetGeneration(), nil
					}
				}
				return false, nil
			})
		}
	}
	t.Logf("%d objects of %d samples reconciled", applied, len(files)-1)
}
