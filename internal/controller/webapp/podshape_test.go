package webapp_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A WebApp with volumes, an init container, a sidecar, pull Secrets,
// placement and pod metadata: the Deployment's pods carry each, the extra
// containers run restricted, and a change to a mounted ConfigMap rolls the
// pods as one read through env does.
func TestPodShapeReachesTheDeployment(t *testing.T) {
	ns := env.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site"}, Data: map[string]string{"index.html": "a"}}
	create(t, cm)
	app := newApp(ns, "shaped")
	app.Spec.Volumes = []v1alpha1.WebAppVolume{
		{Name: "site", ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "site"}}},
		{Name: "scratch", EmptyDir: &corev1.EmptyDirVolumeSource{}},
		{Name: "uploads", PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "uploads"}},
	}
	app.Spec.VolumeMounts = []corev1.VolumeMount{{Name: "site", MountPath: "/srv", ReadOnly: true}, {Name: "scratch", MountPath: "/tmp"}}
	app.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate:1", Args: []string{"up"}}}
	app.Spec.Sidecars = []corev1.Container{{Name: "proxy", Image: "proxy:1",
		SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}}}
	app.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	app.Spec.Placement = &v1alpha1.Placement{NodeSelector: map[string]string{"pool": "web"},
		Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
		PriorityClassName: "web"}
	app.Spec.PodMetadata = &v1alpha1.PodMetadata{Labels: map[string]string{"team": "shop"},
		Annotations: map[string]string{"prometheus.io/scrape": "true"}}
	create(t, app)
	hash := func(d *appsv1.Deployment) string { return d.Spec.Template.Annotations["daytwo.dev/config-hash"] }
	d := deploymentOf(t, app, "created", func(d *appsv1.Deployment) bool { return hash(d) != "" })
	pod := d.Spec.Template
	c := appContainer(d)
	if len(pod.Spec.Volumes) != 3 || len(c.VolumeMounts) != 2 || pod.Spec.Volumes[2].PersistentVolumeClaim.ClaimName != "uploads" {
		t.Errorf("volumes %+v, mounts %+v", pod.Spec.Volumes, c.VolumeMounts)
	}
	if ic := pod.Spec.InitContainers; len(ic) != 2 || ic[0].Name != "migrate" || ic[0].RestartPolicy != nil ||
		ic[1].Name != "proxy" || ptr.Deref(ic[1].RestartPolicy, "") != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("init containers %+v, want migrate then the proxy sidecar", ic)
	}
	for _, ic := range pod.Spec.InitContainers {
		sc := ic.SecurityContext
		if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
			t.Errorf("%s is not restricted: %+v", ic.Name, sc)
		}
	}
	if !ptr.Deref(pod.Spec.InitContainers[1].SecurityContext.ReadOnlyRootFilesystem, false) {
		t.Errorf("the sidecar's own security setting was lost")
	}
	if pod.Spec.NodeSelector["pool"] != "web" || len(pod.Spec.Tolerations) != 1 || pod.Spec.PriorityClassName != "web" ||
		len(pod.Spec.ImagePullSecrets) != 1 || pod.Labels["team"] != "shop" || pod.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("placement and metadata: nodeSelector %v, tolerations %v, priority %q, pull %v, labels %v, annotations %v",
			pod.Spec.NodeSelector, pod.Spec.Tolerations, pod.Spec.PriorityClassName, pod.Spec.ImagePullSecrets, pod.Labels, pod.Annotations)
	}
	first := hash(d)
	update(t, cm, func(cm *corev1.ConfigMap) { cm.Data["index.html"] = "b" })
	deploymentOf(t, app, "rolled by the mounted ConfigMap", func(d *appsv1.Deployment) bool { return hash(d) != first })

	// A mount of no volume is refused, naming the field.
	bad := newApp(ns, "bad-mount")
	bad.Spec.VolumeMounts = []corev1.VolumeMount{{Name: "nowhere", MountPath: "/x"}}
	if err := env.Client.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "volumeMount") {
		t.Errorf("a mount of no volume: %v, want Invalid naming the volumeMounts", err)
	}
	two := newApp(ns, "two-sources")
	two.Spec.Volumes = []v1alpha1.WebAppVolume{{Name: "x", EmptyDir: &corev1.EmptyDirVolumeSource{},
		Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}
	if err := env.Client.Create(ctx, two); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.volumes[0]") {
		t.Errorf("a volume with two sources: %v, want Invalid naming spec.volumes[0]", err)
	}
}
