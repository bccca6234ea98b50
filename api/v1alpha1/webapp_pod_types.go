package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// WebAppPodShape is the part of a WebApp's spec that shapes its pods
// beyond the app's container: volumes, init and sidecar containers, and
// where the pods run.
// +kubebuilder:validation:XValidation:rule="!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))",message="every volumeMount must name one of spec.volumes"
// +kubebuilder:validation:XValidation:rule="!has(self.volumes) || self.volumes.all(v, v.name != 'database-ca')",message="the volume name database-ca is daytwo's own",fieldPath=".volumes"
// +kubebuilder:validation:XValidation:rule="(!has(self.initContainers) || self.initContainers.all(c, c.name != 'app')) && (!has(self.sidecars) || self.sidecars.all(c, c.name != 'app'))",message="the container name app is the application's own"
type WebAppPodShape struct {
	// volumes the pods mount: ConfigMaps, Secrets, emptyDirs and
	// PersistentVolumeClaims. The pods roll when a mounted ConfigMap or
	// Secret changes, as they do for env.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Volumes []WebAppVolume `json:"volumes,omitempty"`

	// volumeMounts of the app's container.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// initContainers run to completion, in order, before the app starts
	// (a migration, say). They get the restricted security context
	// unless they set their own.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	InitContainers []corev1.Container `json:"initContainers,omitempty"`

	// sidecars run beside the app for the pod's whole life (a proxy or a
	// log shipper): Kubernetes' native sidecars, started before the app
	// and stopped after it. They get the restricted security context
	// unless they set their own.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Sidecars []corev1.Container `json:"sidecars,omitempty"`

	// imagePullSecrets name Secrets the pods' images are pulled with.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// placement says where the pods run: nodeSelector, tolerations,
	// affinity and priorityClassName.
	// +optional
	Placement *Placement `json:"placement,omitempty"`

	// podMetadata is labels and annotations added to the pods.
	// +optional
	PodMetadata *PodMetadata `json:"podMetadata,omitempty"`
}

// WebAppVolume is one volume of a WebApp's pods: exactly one source.
// +kubebuilder:validation:XValidation:rule="[has(self.configMap), has(self.secret), has(self.emptyDir), has(self.persistentVolumeClaim)].filter(x, x).size() == 1",message="a volume sets exactly one of configMap, secret, emptyDir or persistentVolumeClaim"
type WebAppVolume struct {
	// name of the volume, as volumeMounts name it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// configMap mounts a ConfigMap's keys as files.
	// +optional
	ConfigMap *corev1.ConfigMapVolumeSource `json:"configMap,omitempty"`

	// secret mounts a Secret's keys as files.
	// +optional
	Secret *corev1.SecretVolumeSource `json:"secret,omitempty"`

	// emptyDir is scratch space that lives as long as the pod.
	// +optional
	EmptyDir *corev1.EmptyDirVolumeSource `json:"emptyDir,omitempty"`

	// persistentVolumeClaim mounts an existing claim. Every pod mounts the
	// same claim: use a ReadWriteMany or ReadOnlyMany one with more than one
	// replica.
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
}
