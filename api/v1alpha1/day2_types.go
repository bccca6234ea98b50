package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HibernationMode is spec.hibernation.
// +kubebuilder:validation:Enum=On;Off
type HibernationMode string

// Hibernation modes.
const (
	HibernationOn  HibernationMode = "On"
	HibernationOff HibernationMode = "Off"
)

// DatabaseMaintenance is spec.maintenance: when daytwo may move or restart
// the primary for a planned change (a restart-only setting, a new image).
// The replicas roll at once; the primary's turn waits for a window, or
// for the annotation daytwo.dev/approve-primary-update naming the
// revision. A failover, a node drain and a broken primary never wait.
type DatabaseMaintenance struct {
	// schedule is a cron expression: each time it fires, a window opens.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$`
	Schedule string `json:"schedule"`

	// duration of each window; the primary's turn starts inside it.
	// +optional
	// +kubebuilder:default="1h"
	Duration *metav1.Duration `json:"duration,omitempty"`

	// timeZone is the IANA time zone the schedule is read in; defaults to UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TimeZone string `json:"timeZone,omitempty"`
}
