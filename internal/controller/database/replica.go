package database

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// Replica Databases (spec.replica). The protocol, with the primary Lease:
//
//   - While spec.replica.enabled, the Lease is held by
//     instanceapi.ExternalHolder, which no instance is and none renews.
//     Every instance is therefore a replica; its upstream is the source
//     (its -rw address when spec.replica.source.host is set, else none),
//     and its restore_command reads the source's archive at any time. The
//     HA phases do not run: there is no primary here to fail over.
//   - enabled: false is the declared promotion. The HA phases run again;
//     the Lease's holder is external and never renewed, so failover
//     moves it to the most advanced instance that answers, by the rule
//     every failover follows, and promotes it.
//   - Before it promotes, that instance claims the source's archive
//     (instanceapi.PromotedKey, written only if absent): a claim by
//     another Database refuses the promotion, so two replicas of one
//     source cannot both be promoted from it.
//   - Every instance that archives watches its own archive for a claim
//     not its own: a primary that sees one stops serving and none of its
//     instances is promoted or starts as primary again, so a source that
//     comes back after an unplanned promotion does not serve writes. Until
//     it sees the claim (a source cut off from its bucket), it may;
//     what it writes then is not in the archive the replica followed.

// replicaPlan is where a replica Database's instances find the source.
type replicaPlan struct {
	location string
	storagePlan
	host string
	port int
	// password and ca: the source's replication password and server
	// CA, when the instances stream from host.
	password, ca *v1alpha1.SecretKeyRef
}

// sourceBackup is the source's continuous backup as a DatabaseBackup of
// db's namespace would describe it, for the helpers that read one.
func sourceBackup(db *v1alpha1.Database) *v1alpha1.DatabaseBackup {
	src := db.Spec.Replica.Source
	b := &v1alpha1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-source"},
		Spec: v1alpha1.DatabaseBackupSpec{Method: v1alpha1.BackupMethodPhysical, Storage: src.Storage,
			SeriesKeySecretRef: &src.SeriesKeySecretRef, Encryption: src.Encryption}}
	b.Spec.DatabaseRef.Name = db.Name
	return b
}

// resolveReplica builds the replica plan of a Database with spec.replica:
// its instances keep reaching the source's archive after a promotion too
// (the template does not change, so nothing restarts).
func (r *Reconciler) resolveReplica(_ context.Context, db *v1alpha1.Database, obs *observation) error {
	rp := db.Spec.Replica
	if rp == nil {
		return nil
	}
	b := sourceBackup(db)
	if problem := series.AudienceProblem(b, r.APIAudiences); problem != "" {
		obs.found.restoreFailed = "spec.replica.source: " + problem
		return nil
	}
	p := &replicaPlan{location: series.Location(b), storagePlan: storagePlanOf(b, instanceapi.SourceFiles)}
	if a := obs.plan.archive; a != nil && (strings.HasPrefix(a.location, p.location) || strings.HasPrefix(p.location, a.location)) {
		obs.found.restoreFailed = fmt.Sprintf("spec.replica.source: DatabaseBackup %s archives this Database's WAL to %s, where the source "+
			"archives (%s): give it a prefix of its own", a.backup, a.location, p.location)
		return nil
	}
	if rp.Source.Host != "" {
		p.host, p.port = rp.Source.Host, int(cmp.Or(rp.Source.Port, instanceapi.PostgresPort))
		p.password, p.ca = rp.Source.ReplicationPasswordSecretRef, rp.Source.CASecretRef
	}
	obs.plan.replica = p
	return nil
}

// replicaConf is the replica-source.json content, "" for no replica.
func (p plan) replicaConf() string {
	if p.replica == nil {
		return ""
	}
	b, _ := json.Marshal(instanceapi.ReplicaSource{Archive: p.replica.conf, Host: p.replica.host, Port: p.replica.port}) //nolint:errchkjson // strings and ints always marshal
	return string(b)
}

// sourceSecrets projects what reaching the source takes.
func sourceSecrets(p plan) []*corev1ac.VolumeProjectionApplyConfiguration {
	rp := p.replica
	if rp == nil {
		return nil
	}
	out := rp.projections(instanceapi.SourceFiles)
	if rp.password != nil {
		out = append(out, secretFile(rp.password.Name, cmp.Or(rp.password.Key, v1alpha1.CredentialsPassword), instanceapi.SecretSourceReplicationPassword))
	}
	if rp.ca != nil {
		out = append(out, secretFile(rp.ca.Name, cmp.Or(rp.ca.Key, "ca.crt"), instanceapi.SecretSourceServerCA))
	}
	return out
}

// following says whether db follows its source now: no instance may
// be promoted, and nothing acts on a primary.
func following(db *v1alpha1.Database) bool {
	return db.Spec.Replica != nil && db.Spec.Replica.Enabled
}

// replicaStatus is where a replica Database stands against its source,
// from its most advanced instance; after the promotion, when it was
// promoted.
func replicaStatus(db *v1alpha1.Database, obs *observation) *v1alpha1.ReplicaStatus {
	if db.Spec.Replica == nil {
		return nil
	}
	out := &v1alpha1.ReplicaStatus{}
	if prev := db.Status.Replica; prev != nil {
		out.PromotedTime = prev.PromotedTime
	}
	if obs.plan.replica != nil {
		out.Source = obs.plan.replica.location
	}
	out.DemotionToken = demotionToken(db, obs)
	if !following(db) {
		// Failover promoted it, from the source outside.
		if f := db.Status.LastFailover; out.PromotedTime == nil && f != nil && f.From == instanceapi.ExternalHolder && f.PromotedTime != nil {
			out.PromotedTime = f.PromotedTime
		}
		return out
	}
	// The most advanced instance; of equals, the first by name, so the
	// status does not flap between them.
	best, bestLSN, found := instanceapi.Status{}, uint64(0), false
	for _, name := range slices.Sorted(maps.Keys(obs.Instances)) {
		s := obs.Instances[name]
		if lsn, ok := postgres.ParseLSN(s.LSN); ok && (!found || lsn > bestLSN) {
			best, bestLSN, found = s, lsn, true
		}
	}
	if best.Source == nil {
		return out
	}
	out.PromotableLSN, out.Streaming = best.LSN, best.Source.Streaming
	if end, ok := postgres.ParseLSN(best.Source.EndLSN); ok && end > bestLSN {
		out.LagBytes = int64(end - bestLSN)
	}
	if t := best.Source.ReplayedTime; t != nil {
		out.PromotableTime = &metav1.Time{Time: t.UTC().Truncate(time.Second)}
		out.LagSeconds = int64(max(0, obs.now.Sub(*t)/time.Second))
	}
	return out
}

// followingMessage is the Ready condition's message of a replica
// Database: stable while it replays (status.replica says how far).
func followingMessage(st *v1alpha1.DatabaseStatus) string {
	msg := fmt.Sprintf("%d of %d instances follow the source, read-only", st.ReadyInstances, st.Instances)
	switch r := st.Replica; {
	case r == nil || r.PromotableLSN == "":
		return msg + "; none has replayed its WAL yet"
	case r.Streaming:
		return msg + ", streaming; status.replica says how far a promotion now would keep"
	default:
		return msg + ", from its archive; status.replica says how far a promotion now would keep"
	}
}

// firstHolder is who the primary Lease names when it is made: the first
// instance, or the source outside for a replica Database.
func firstHolder(db *v1alpha1.Database) string {
	// Created promoted (enabled: false) too: its data still comes from
	// the source, and failover promotes an instance at once.
	if db.Spec.Replica != nil {
		return instanceapi.ExternalHolder
	}
	return podName(db, 0)
}

// promotingMessage says where a replica Database's promotion stands
// before an instance serves: failover picks the instance.
func promotingMessage(db *v1alpha1.Database, obs *observation) string {
	msg := "spec.replica.enabled is false: the most advanced instance is promoted, once it claimed the source's WAL archive"
	if held := promotionHeld(db, obs); held != "" {
		return "spec.replica.enabled is false: " + held
	}
	if obs.FailoverWaiting != "" {
		msg += "; waiting: " + obs.FailoverWaiting
	}
	return msg
}

// supersededBy is the Database an instance says was promoted from this
// one's archive or its source's, "" when none does.
func supersededBy(obs *observation) string {
	for _, s := range obs.InstanceStatuses {
		if s.Superseded != "" {
			return s.Superseded
		}
	}
	return ""
}

// waiveClaim records on the primary Lease that a promotion of db makes no
// claim on its source's archive (spec.replica.promotion: Unclaimed), or
// consumes its promotion token instead, once it is declared, before an
// instance is promoted; a claim made already stands.
func (r *Reconciler) waiveClaim(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	l := obs.Lease
	if db.Spec.Replica == nil || following(db) || (db.Spec.Replica.Promotion != v1alpha1.ReplicaPromotionUnclaimed && db.Spec.Replica.PromotionToken == "") || l == nil ||
		l.Annotations[instanceapi.AnnotationSourceClaim] != "" {
		return nil
	}
	l = l.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[instanceapi.AnnotationSourceClaim] = instanceapi.SourceClaimWaived
	if tok := db.Spec.Replica.PromotionToken; tok != "" {
		// Consumed, not claimed: see instance.Manager.consumeToken.
		l.Annotations[instanceapi.AnnotationSourceClaim] = instanceapi.SourceClaimToken + tok
	}
	// With the resourceVersion read: a move or a renewal in between wins,
	// and the next reconcile tries again.
	if err := r.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("failed to waive the source's claim on Lease %s: %w", l.Name, err)
	}
	obs.Lease = l
	return nil
}
