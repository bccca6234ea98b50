package instanceapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

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

// A planned switch between regions. The primary Database is demoted
// (spec.replica set on it): the operator asks its primary to hand the
// Lease over to ExternalHolder (PathDemote); the primary stops cleanly,
// ships the segment that holds its shutdown checkpoint to its archive as
// <segment>.demoted (a replica that follows the archive alone reads it in
// the segment's place), claims its own archive for itself as demoted
// (DemotedClaimUID), so no other replica of it is ever promoted from it by
// a claim, and hands the Lease over with its DemotionToken recorded on it
// (AnnotationDemotionToken; the Database's status shows it). The other
// Database's promotion with that token (spec.replica.promotionToken) is
// held until one of its instances has replayed up to the token's LSN on
// its timeline; that instance checks it again itself, and consumes the
// token in the source's archive (DemotionKey, written only if absent)
// instead of claiming it: a token promotes one Database, once.
const (
	// AnnotationDemotionToken on a demoted Database's primary Lease is
	// its DemotionToken, encoded.
	AnnotationDemotionToken = "daytwo.dev/demotion-token"
	// demotedClaimPrefix prefixes DemotedClaimUID.
	demotedClaimPrefix = "demoted:"
)

// DemotionKey is, under the demoted Database's archive, the record of the
// Database its token promoted (a PromotionClaim).
func (t DemotionToken) DemotionKey() string {
	return fmt.Sprintf("demotion-%d-%s.json", t.Timeline, strings.ReplaceAll(t.LSN, "/", "-"))
}

// DemotedClaimUID is the DatabaseUID of the claim a demoted Database
// writes on its own archive: not another Database's, so it supersedes
// nothing there, and no replica's claim can win over it.
func DemotedClaimUID(uid string) string { return demotedClaimPrefix + uid }

// Demoted says whether c is a demoted Database's claim on its own archive.
func (c PromotionClaim) Demoted() bool { return strings.HasPrefix(c.DatabaseUID, demotedClaimPrefix) }

// DemotionToken is where a demoted Database's last primary stopped.
type DemotionToken struct {
	// Database is the demoted Database, namespace/name.
	Database string `json:"database"`
	// Timeline and LSN are those of the shutdown checkpoint.
	Timeline int    `json:"timeline"`
	LSN      string `json:"lsn"`
}

// Encode is the token as users pass it on: base64 (URL) of its JSON.
func (t DemotionToken) Encode() string {
	b, _ := json.Marshal(t) //nolint:errchkjson // strings and an int always marshal
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseDemotionToken reads an encoded DemotionToken.
func ParseDemotionToken(s string) (DemotionToken, error) {
	var t DemotionToken
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err == nil && (t.Timeline < 1 || t.LSN == "") {
		err = errors.New("it names no timeline or LSN")
	}
	if err != nil {
		return DemotionToken{}, fmt.Errorf("not a demotion token (copy the source's status.replica.demotionToken): %w", err)
	}
	return t, nil
}
