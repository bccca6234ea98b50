package main

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// toolJob is one of the plugin's Jobs (pgbench, fio): app names it in the
// labels; its pod, spec, runs once, without an API token, and the Job is
// deleted an hour after it ends.
func toolJob(ns, name, app string, spec corev1.PodSpec) *batchv1.Job {
	labels := map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "kubectl-daytwo"}
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.AutomountServiceAccountToken = ptr.To(false)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			TTLSecondsAfterFinished: ptr.To[int32](3600),
			Template:                corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}
