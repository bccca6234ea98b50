package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// PoolMode is when a client's server connection goes back to the pool.
// +kubebuilder:validation:Enum=transaction;session
type PoolMode string

const (
	// PoolModeTransaction returns the server connection after each
	// transaction: many clients share few connections. Session state
	// (SET, advisory locks, LISTEN, temporary tables) does not outlive a
	// transaction; prepared statements do.
	PoolModeTransaction PoolMode = "transaction"
	// PoolModeSession keeps a server connection per client connection.
	PoolModeSession PoolMode = "session"
)

// PoolerSpec is a PgBouncer pool in front of the Database, run and kept
// by daytwo: read-write in front of the primary (Service
// <database>-pooler-rw) and, with readOnly, read-only in front of the
// replicas (<database>-pooler-ro). Clients log in as any login role
// (PgBouncer looks the role's SCRAM verifier up with a dedicated role,
// daytwo_pooler, which cannot read anything else) and verify the pooler
// with the Database's CA, as they verify the Database. A switchover
// pauses the pools: transactions under way finish first, new ones wait
// for the new primary instead of failing.
type PoolerSpec struct {
	// instances is the number of PgBouncer pods of each pool, spread
	// across nodes, with a PodDisruptionBudget that keeps all but one.
	// Defaults to 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Instances *int32 `json:"instances,omitempty"`

	// readOnly adds the read-only pool in front of the replicas (the -ro
	// Service; the primary when no replica is ready).
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`

	// poolMode is transaction (the default) or session.
	// +optional
	// +kubebuilder:default=transaction
	PoolMode PoolMode `json:"poolMode,omitempty"`

	// defaultPoolSize is the number of server connections each pod keeps
	// per role and database. Defaults to 20: keep instances times it, for
	// every role and database in use, under max_connections.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	DefaultPoolSize *int32 `json:"defaultPoolSize,omitempty"`

	// maxClientConnections is the number of client connections each pod
	// accepts. Defaults to 1000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxClientConnections *int32 `json:"maxClientConnections,omitempty"`

	// resources of the PgBouncer container. Defaults to a request of
	// 50m CPU and 64Mi memory, and a limit of 1 CPU and 256Mi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// image is a PgBouncer image with pgbouncer on its PATH. Defaults to
	// the operator's (--pooler-image).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
}

// PoolerStatus is where the pools stand.
type PoolerStatus struct {
	// readyInstances counts the ready PgBouncer pods of the read-write
	// pool.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`
	// readOnlyReadyInstances counts those of the read-only pool.
	// +optional
	ReadOnlyReadyInstances int32 `json:"readOnlyReadyInstances,omitempty"`
	// host is the read-write pool's Service, for clients.
	// +optional
	Host string `json:"host,omitempty"`
}

// ConditionPoolerReady is True when every PgBouncer pod of the pools is
// ready and serving, False with the pool that is not.
const ConditionPoolerReady = "PoolerReady"

// Reasons of ConditionPoolerReady.
const (
	ReasonPoolerReady       = "PoolerReady"
	ReasonPoolerProgressing = "PoolerProgressing"
)

// Keys the role and credentials Secrets carry when spec.pooler is set:
// the read-write pool's host and a URI through it.
const (
	CredentialsPoolerHost = "pooler-host"
	CredentialsPoolerURI  = "pooler-uri"
)

// PoolerProblem says why db's pooler cannot run as declared, or "".
func (d *Database) PoolerProblem() string {
	if d.Spec.Pooler != nil && d.Spec.TLS != nil && d.Spec.TLS.ServerCertificate != nil {
		return "a pool serves a certificate from the Database's own CA, which clients of spec.tls.serverCertificate's CA cannot verify; " +
			"use the pool without a certificate of your own, for now"
	}
	return ""
}

// PoolerName is the Deployment, Service and PodDisruptionBudget of a
// pool: readOnly false is the read-write one.
func (d *Database) PoolerName(readOnly bool) string {
	if readOnly {
		return d.Name + "-pooler-ro"
	}
	return d.Name + "-pooler-rw"
}
