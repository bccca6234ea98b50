// Package v1alpha1 contains the daytwo.dev/v1alpha1 API: WebApp, Database and
// DatabaseBackup.
//
// +kubebuilder:object:generate=true
// +groupName=daytwo.dev
package v1alpha1
