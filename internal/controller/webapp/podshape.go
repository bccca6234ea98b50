package webapp

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// shapePod adds spec's volumes, init and sidecar containers, pull Secrets
// and placement to a pod, and the volume mounts to the app's container c.
// Nothing is added for a field left unset, so a WebApp without them keeps
// its template (and its pods) across an operator upgrade.
func shapePod(app *v1alpha1.WebApp, spec *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	s := app.Spec.WebAppPodShape
	for _, v := range s.Volumes {
		spec.WithVolumes(controller.ApplyConfig[corev1ac.VolumeApplyConfiguration](&corev1.Volume{Name: v.Name,
			VolumeSource: corev1.VolumeSource{ConfigMap: v.ConfigMap, Secret: v.Secret, EmptyDir: v.EmptyDir,
				PersistentVolumeClaim: v.PersistentVolumeClaim}}))
	}
	c.WithVolumeMounts(controller.ApplyConfigs[corev1ac.VolumeMountApplyConfiguration](s.VolumeMounts)...)
	for _, ic := range s.InitContainers {
		spec.WithInitContainers(extraContainer(ic))
	}
	for _, sc := range s.Sidecars {
		// A native sidecar: an init container that keeps running.
		spec.WithInitContainers(extraContainer(sc).WithRestartPolicy(corev1.ContainerRestartPolicyAlways))
	}
	pl := ptr.Deref(s.Placement, v1alpha1.Placement{})
	controller.Place(spec, pl, s.ImagePullSecrets)
	if pl.Affinity != nil {
		spec.WithAffinity(controller.ApplyConfig[corev1ac.AffinityApplyConfiguration](pl.Affinity))
	}
}

// extraContainer is an init or sidecar container as declared, with the
// restricted security context's defaults under what it sets itself.
func extraContainer(c corev1.Container) *corev1ac.ContainerApplyConfiguration {
	out := controller.ApplyConfig[corev1ac.ContainerApplyConfiguration](&c)
	out.SecurityContext = controller.Overlay[corev1ac.SecurityContextApplyConfiguration](&corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}, c.SecurityContext)
	if out.TerminationMessagePolicy == nil {
		out.WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError)
	}
	return out
}
