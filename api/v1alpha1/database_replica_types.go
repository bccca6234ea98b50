package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// DatabaseReplica is spec.replica: a Database that follows another
// Database (the source, in another namespace or cluster) through the
// source's WAL archive, and streams from it when it can reach it. Every
// instance is a read-only standby of the source; none is promoted until
// enabled turns false, the declared promotion.
//
// A planned switch between regions: set spec.replica (enabled: true,
// the other Database as the source) on the primary Database, which
// demotes it (its primary stops cleanly, ships its last WAL and records
// status.replica.demotionToken); then set enabled: false and that token
// as promotionToken on the other, which promotes once it has replayed
// everything the demoted primary wrote. The demoted Database follows
// the promoted one from then on.
// +kubebuilder:validation:XValidation:rule="!has(self.promotionToken) || !self.enabled",message="spec.replica.promotionToken: a token is for the promotion (enabled: false)"
type DatabaseReplica struct {
	// enabled true (the default) keeps the Database a replica of its
	// source. false promotes it: the most advanced instance becomes a
	// primary on a new timeline, once it has claimed the source's
	// archive, so that the source, seeing the claim, stops serving
	// writes. A promoted Database never follows its source again.
	// +optional
	// +kubebuilder:default=true
	Enabled bool `json:"enabled"`

	// promotion says what a promotion needs of the source's archive.
	// Claimed (the default) claims it first: the source stops serving
	// once it sees the claim, and no other replica of it can be
	// promoted; while the bucket cannot be written, the promotion waits.
	// Unclaimed promotes without a claim: for a drill that must leave the
	// source alone, or when the source's bucket went with its region.
	// Nothing then stops a source that still runs from serving too.
	// +optional
	// +kubebuilder:default=Claimed
	Promotion ReplicaPromotion `json:"promotion,omitempty"`

	// source is where the source Database's WAL and base backups are.
	// +required
	Source ReplicaSource `json:"source"`

	// promotionToken is the source's status.replica.demotionToken, for a
	// planned switch: the promotion waits until an instance has replayed
	// all the demoted source wrote, so no acknowledged write is lost.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	PromotionToken string `json:"promotionToken,omitempty"`
}

// ReplicaPromotion is what a replica Database's promotion needs of its
// source's archive.
// +kubebuilder:validation:Enum=Claimed;Unclaimed
type ReplicaPromotion string

// Replica promotions.
const (
	ReplicaPromotionClaimed   ReplicaPromotion = "Claimed"
	ReplicaPromotionUnclaimed ReplicaPromotion = "Unclaimed"
)

// ReplicaSource is the source Database's continuous backup (its Physical
// DatabaseBackup's storage), and optionally its -rw address to stream from.
// +kubebuilder:validation:XValidation:rule="has(self.storage.s3) && has(self.storage.s3.prefix)",message="spec.replica.source.storage: an s3 bucket with the prefix the source archives under (its DatabaseBackup's spec.storage.s3.prefix, else <namespace>/<name> of that DatabaseBackup)"
// +kubebuilder:validation:XValidation:rule="!has(self.host) || has(self.replicationPasswordSecretRef)",message="spec.replica.source.replicationPasswordSecretRef: streaming from host needs the source's replication password"
// +kubebuilder:validation:XValidation:rule="!has(self.host) || has(self.caSecretRef)",message="spec.replica.source.caSecretRef: streaming from host needs the CA that signed the source's server certificate"
type ReplicaSource struct {
	// storage is the source's archive: the bucket and prefix its
	// Physical DatabaseBackup writes, with credentials of this cluster.
	// +required
	Storage BackupStorage `json:"storage"`

	// seriesKeySecretRef names a copy of the source DatabaseBackup's
	// series key (Secret <backup>-series-key, key "key"): every base
	// backup and WAL file is verified with it before it is used.
	// +required
	SeriesKeySecretRef SecretKeyRef `json:"seriesKeySecretRef"`

	// encryption is the source DatabaseBackup's spec.encryption, with
	// a copy of its key here, when the source encrypts.
	// +optional
	Encryption *BackupEncryption `json:"encryption,omitempty"`

	// host is the source's -rw address as this cluster reaches it (a
	// LoadBalancer's, say). With it, the instances stream WAL from the
	// source as it is written; without it they replay the archive only,
	// up to a minute behind under a light writer (archive_timeout).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$`
	Host string `json:"host,omitempty"`

	// port is the source's PostgreSQL port; 5432 when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// replicationPasswordSecretRef names a copy of the source's
	// replication password (Secret <source>-replication, key
	// "password").
	// +optional
	ReplicationPasswordSecretRef *SecretKeyRef `json:"replicationPasswordSecretRef,omitempty"`

	// caSecretRef names the CA (key ca.crt) that signed the source's
	// server certificate (Secret <source>-ca, or the issuer of the
	// source's spec.tls): the stream is TLS, and the server is verified.
	// +optional
	CASecretRef *SecretKeyRef `json:"caSecretRef,omitempty"`
}

// ReplicaStatus is where a replica Database stands against its source.
type ReplicaStatus struct {
	// source is the source's archive location.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Source string `json:"source,omitempty"`

	// streaming is true while the most advanced instance streams from
	// the source.
	// +optional
	Streaming bool `json:"streaming,omitempty"`

	// promotableLSN is the point a promotion now would keep everything
	// up to: the WAL the most advanced instance replayed.
	// +optional
	// +kubebuilder:validation:MaxLength=17
	PromotableLSN string `json:"promotableLSN,omitempty"`

	// promotableTime is when the newest transaction replayed there
	// committed on the source.
	// +optional
	PromotableTime *metav1.Time `json:"promotableTime,omitempty"`

	// lagBytes is how much WAL the source has (in its archive, or
	// streamed) that is not replayed yet.
	// +optional
	LagBytes int64 `json:"lagBytes,omitempty"`

	// lagSeconds is the time since promotableTime: with a steady writer
	// on the source, how much of its history a promotion now would lose.
	// +optional
	LagSeconds int64 `json:"lagSeconds,omitempty"`

	// promotedTime is when the Database was first seen promoted.
	// +optional
	PromotedTime *metav1.Time `json:"promotedTime,omitempty"`

	// demotionToken says where the last primary of a demoted Database
	// (spec.replica set on a primary one) stopped: give it to the
	// Database to promote as spec.replica.promotionToken.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	DemotionToken string `json:"demotionToken,omitempty"`
}
