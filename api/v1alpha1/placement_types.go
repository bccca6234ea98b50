package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// Placement says where pods run: the fields a platform team sets to put a
// workload on its own node pool. Each is the pod spec's field of the same
// name.
type Placement struct {
	// nodeSelector keeps the pods to nodes with these labels (a
	// database node pool, say).
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let the pods run on tainted nodes (the taint that keeps
	// other workloads off a dedicated pool).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity is the pods' node and pod affinity. On a Database its
	// podAntiAffinity, when set, replaces the one antiAffinity makes.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// priorityClassName of the pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// DatabasePlacement is spec.placement: where a Database's instances run.
// +kubebuilder:validation:XValidation:rule="!has(self.affinity) || !has(self.affinity.podAntiAffinity) || !has(self.antiAffinity) || self.antiAffinity == 'Preferred'",message="affinity.podAntiAffinity replaces what antiAffinity makes: set one of them",fieldPath=".antiAffinity"
type DatabasePlacement struct {
	Placement `json:",inline"`

	// antiAffinity says how the instances keep off each other's nodes:
	// Preferred (the default: apart where the nodes allow, together on a
	// one-node cluster), Required (an instance waits Pending rather than
	// share a node with another), or None.
	// +optional
	// +kubebuilder:default=Preferred
	AntiAffinity AntiAffinityMode `json:"antiAffinity,omitempty"`

	// topologySpreadConstraints replace the default spread across zones
	// (maxSkew 1, ScheduleAnyway). A constraint without a labelSelector
	// counts the Database's instances.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
}

// AntiAffinityMode is spec.placement.antiAffinity.
// +kubebuilder:validation:Enum=Preferred;Required;None
type AntiAffinityMode string

// Anti-affinity modes.
const (
	AntiAffinityPreferred AntiAffinityMode = "Preferred"
	AntiAffinityRequired  AntiAffinityMode = "Required"
	AntiAffinityNone      AntiAffinityMode = "None"
)

// PodMetadata is labels and annotations added to the pods a kind makes
// (and, on a Database, to its instances' ServiceAccount, where a
// workload-identity annotation such as eks.amazonaws.com/role-arn goes).
// Keys under daytwo.dev/ and app.kubernetes.io/ are daytwo's own and
// refused.
type PodMetadata struct {
	// labels added to the pods.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('daytwo.dev/') && !k.startsWith('app.kubernetes.io/'))",message="labels under daytwo.dev/ and app.kubernetes.io/ are daytwo's own"
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the pods.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('daytwo.dev/') && !k.startsWith('kubectl.kubernetes.io/'))",message="annotations under daytwo.dev/ and kubectl.kubernetes.io/ are daytwo's own"
	Annotations map[string]string `json:"annotations,omitempty"`
}

// DatabaseServices is spec.services: how the read-write and read-only
// Services are exposed.
type DatabaseServices struct {
	// readWrite is the <name>-rw Service, to the primary.
	// +optional
	ReadWrite *ServiceTemplate `json:"readWrite,omitempty"`

	// readOnly is the <name>-ro Service, to the replicas.
	// +optional
	ReadOnly *ServiceTemplate `json:"readOnly,omitempty"`
}

// ServiceTemplate is how one Service is exposed.
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancerSourceRanges) || self.type == 'LoadBalancer'",message="loadBalancerSourceRanges needs type LoadBalancer"
type ServiceTemplate struct {
	// type of the Service: ClusterIP (the default), NodePort, or
	// LoadBalancer for clients outside the cluster. The server's
	// certificate names only the in-cluster names: a client reaching it
	// by another name verifies the CA with sslmode=verify-ca, or serves
	// its own certificate through spec.tls.
	// +optional
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`

	// annotations of the Service (a cloud load balancer's settings).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`

	// loadBalancerSourceRanges restricts who reaches a LoadBalancer
	// Service (CIDRs).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`
}
