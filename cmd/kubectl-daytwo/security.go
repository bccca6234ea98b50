package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// restrictedPod is the restricted Pod Security Standard's pod context for
// the plugin's Jobs and pods, running as uid.
func restrictedPod(uid int64) *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

// restrictedContainer is the standard's container context: no escalation,
// no capabilities, a read-only root.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}
