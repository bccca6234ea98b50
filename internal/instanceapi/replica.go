package instanceapi

import "time"

// The contract of replica Databases (spec.replica): what the operator
// tells a replica's instances about its source, who holds its primary
// Lease while it follows, and the claim a promotion leaves in the
// source's archive.

// ReplicaSource is what a replica Database follows: the source's WAL
// archive and base backups (Archive's storage and prefix), and its -rw
// address when it streams from it.
type ReplicaSource struct {
	Archive
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
}

// ExternalHolder holds the primary Lease of a replica Database: its
// primary is the source, outside the Database, so every instance is a
// replica, and none renews the lease. It can never be a pod's name.
const ExternalHolder = "daytwo.dev/source"

// PromotedKey is, under an archive's prefix, the claim a replica Database
// that was promoted from that archive writes before it serves (a
// PromotionClaim): the Database that archives there stops serving once it
// sees a claim not its own.
const PromotedKey = "promoted.json"

// PromotionClaim is what PromotedKey holds.
type PromotionClaim struct {
	// Database is the promoted Database (namespace/name), DatabaseUID its UID.
	Database    string    `json:"database"`
	DatabaseUID string    `json:"databaseUID"`
	Pod         string    `json:"pod"`
	Time        time.Time `json:"time"`
}
