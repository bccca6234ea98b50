//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// Disaster recovery in another region, two namespaces standing for two
// regions: a source Database archives to MinIO while an application
// writes to it; two replica Databases follow it, one from the archive
// alone and one (two instances) streaming as well. The source is lost
// (its Database deleted): the acknowledged writes each replica lacks then
// are its RPO. The streaming one is promoted (spec.replica.enabled:
// false): it takes writes with its own credentials, its second instance
// follows it, and it claimed the source's archive, so the other replica's
// promotion is refused, naming it: two replicas of one source are never
// both writable. The source, frozen as its region is lost and thawed
// after the promotion, reads the claim in its archive and stops serving.
func TestReplicaDatabasesFollowAnotherNamespaceAndOneIsPromoted(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	regionA, regionB := restrictedNamespace(t), restrictedNamespace(t)
	cluster.ReserveCPU(t, regionA, 200)
	cluster.ReserveCPU(t, regionB, 300)
	minioInCluster(t, regionA)
	endpoint := fmt.Sprintf("minio.%s.svc.cluster.local:9000", regionA)
	createDatabase(t, regionA, "orders", func(db *v1alpha1.Database) {
		db.Spec.Backup = &v1alpha1.DatabaseBackupPolicy{Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{
			Endpoint: endpoint, Bucket: "wal", Insecure: true, CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}}}
	})
	waitDatabase(t, regionA, "orders", 4*time.Minute, "archiving WAL", func(db *v1alpha1.Database) bool {
		return meta.IsStatusConditionTrue(db.Status.Conditions, v1alpha1.ConditionContinuousArchiving) && isReady(1, "")(db)
	})
	waitBackup(t, regionA, "orders-backup", 4*time.Minute, "a base backup", func(b *v1alpha1.DatabaseBackup) bool { return len(b.Status.Backups) == 1 })

	// What region B is given: the bucket's credentials, the series key,
	// and for streaming the replication password and the server's CA.
	copySecret(t, regionA, "s3", regionB, "s3", nil)
	copySecret(t, regionA, "orders-backup-series-key", regionB, "orders-series-key", nil)
	copySecret(t, regionA, "orders-replication", regionB, "orders-replication", nil)
	copySecret(t, regionA, "orders-credentials", regionB, "orders-ca", []string{"ca.crt"})
	source := func(host string) v1alpha1.ReplicaSource {
		s := v1alpha1.ReplicaSource{Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: endpoint, Bucket: "wal", Insecure: true,
			Prefix: regionA + "/orders-backup", CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}},
			SeriesKeySecretRef: v1alpha1.SecretKeyRef{Name: "orders-series-key"}}
		if host != "" {
			s.Host = host
			s.ReplicationPasswordSecretRef = &v1alpha1.SecretKeyRef{Name: "orders-replication"}
			s.CASecretRef = &v1alpha1.SecretKeyRef{Name: "orders-ca"}
		}
		return s
	}
	start := time.Now()
	createDatabase(t, regionB, "archived", func(db *v1alpha1.Database) {
		db.Spec.Replica = &v1alpha1.DatabaseReplica{Enabled: true, Source: source("")}
	})
	createDatabase(t, regionB, "streamed", func(db *v1alpha1.Database) {
		db.Spec.Instances = ptr.To[int32](2)
		db.Spec.Replica = &v1alpha1.DatabaseReplica{Enabled: true, Source: source("orders-rw." + regionA + ".svc.cluster.local")}
	})
	following := func(instances int32, streaming bool) func(*v1alpha1.Database) bool {
		return func(db *v1alpha1.Database) bool {
			r := db.Status.Replica
			return db.Status.Phase == v1alpha1.DatabasePhaseReplica && db.Status.ReadyInstances == instances &&
				r != nil && r.PromotableLSN != "" && r.Streaming == streaming
		}
	}
	waitDatabase(t, regionB, "archived", 4*time.Minute, "following the archive", following(1, false))
	db := waitDatabase(t, regionB, "streamed", 4*time.Minute, "streaming from the source", following(2, true))
	t.Logf("replicas following in %s: %s", time.Since(start).Round(time.Second), meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady).Message)

	// An application writes to the source for a while.
	psqlPod(t, regionA, "psql", "orders")
	writer := cluster.StartWriter(t, regionA, "psql", "client", "host=orders-rw."+regionA+".svc.cluster.local user=app dbname=app connect_timeout=2", "acks")
	framework.Eventually(t, time.Minute, "a replica replaying the writes", func(context.Context) (bool, error) {
		return len(replicaIDs(t, regionB, "streamed-0")) > 100, nil
	})
	time.Sleep(15 * time.Second) // a steady writer, longer than a few segments' worth of streaming
	lag := waitDatabase(t, regionB, "archived", time.Minute, "lag reported", func(db *v1alpha1.Database) bool {
		return db.Status.Replica != nil && db.Status.Replica.PromotableTime != nil
	}).Status.Replica
	t.Logf("archive-only replica before the loss: promotable to %s (%s), %d s and %d bytes behind", lag.PromotableLSN,
		lag.PromotableTime.Format(time.RFC3339), lag.LagSeconds, lag.LagBytes)

	// Region A is lost: its primary stops at once, shipping nothing more.
	lost := time.Now()
	thaw := cluster.Freeze(t, regionA, "orders-0", "postgres")
	defer thaw()
	writes := writer.Stop(t)
	for _, r := range []string{"archived-0", "streamed-0", "streamed-1"} {
		present := settledIDs(t, regionB, r)
		missing := writes.Lost(present)
		rpo := time.Duration(0)
		if len(missing) > 0 {
			rpo = writes.Times[len(writes.Times)-1].Sub(ackTime(writes, missing[0]))
		}
		t.Logf("RPO of %s: %d of %d acknowledged writes missing, %.1f s of the source's history (source lost at %s)", r, len(missing),
			len(writes.Acked), rpo.Seconds(), lost.Format(time.RFC3339))
		if strings.HasPrefix(r, "streamed") && len(missing) > 10 {
			t.Errorf("the streaming replica %s lacks %d acknowledged writes: %v", r, len(missing), missing[:min(10, len(missing))])
		}
	}

	// The promotion of the streaming replica.
	promoted := time.Now()
	t.Log(plugin(t, regionB, "promote", "streamed"))
	db = waitDatabase(t, regionB, "streamed", 3*time.Minute, "promoted", isReady(2, ""))
	t.Logf("promoted in %s: %s is primary; %+v", time.Since(promoted).Round(100*time.Millisecond), db.Status.Primary, db.Status.Replica)
	if db.Status.Replica == nil || db.Status.Replica.PromotedTime == nil {
		t.Errorf("the promotion is not recorded: %+v", db.Status.Replica)
	}
	psqlPod(t, regionB, "psql", "streamed")
	sql(t, regionB, "psql", "streamed-rw", "INSERT INTO acks VALUES (-1)")
	framework.Eventually(t, time.Minute, "the other instance following the promoted one", func(context.Context) (bool, error) {
		other := "streamed-0"
		if db.Status.Primary == other {
			other = "streamed-1"
		}
		return slices.Contains(replicaIDs(t, regionB, other), -1), nil
	})

	// Region A comes back: its primary sees the claim in its archive and
	// stops serving.
	thaw()
	framework.Eventually(t, time.Minute, "the old source refusing writes", func(ctx context.Context) (bool, error) {
		_, _, err := cluster.Exec(ctx, regionA, "psql", "client", "psql", "host=orders-rw."+regionA+".svc.cluster.local user=app dbname=app connect_timeout=2",
			"-v", "ON_ERROR_STOP=1", "-qtAc", "INSERT INTO acks VALUES (-3)")
		return err != nil, nil
	})
	old := waitDatabase(t, regionA, "orders", time.Minute, "superseded", func(db *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonSuperseded && !db.Status.Ready
	})
	t.Logf("the old source: %s", meta.FindStatusCondition(old.Status.Conditions, v1alpha1.ConditionReady).Message)

	// The other replica cannot be promoted from the same source.
	updateDatabase(t, regionB, "archived", func(db *v1alpha1.Database) { db.Spec.Replica.Enabled = false })
	db = waitDatabase(t, regionB, "archived", 2*time.Minute, "its promotion refused", func(db *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonSuperseded && strings.Contains(c.Message, regionB+"/streamed")
	})
	if db.Status.Ready {
		t.Fatalf("the second replica is ready after its refused promotion: %+v", db.Status)
	}
	if err := execWrite(regionB, "archived-0"); err == nil {
		t.Fatal("the second replica took a write")
	}
}

// replicaIDs reads the writer's ids on an instance, through its socket.
func replicaIDs(t *testing.T, ns, pod string) []int { return replicaIDsOf(t, ns, pod, "acks") }

// replicaIDsOf reads the ids of table on an instance, through its socket.
func replicaIDsOf(t *testing.T, ns, pod, table string) []int {
	t.Helper()
	out, _, err := cluster.Exec(context.Background(), ns, pod, "postgres", "psql", "-h", instanceapi.RunDir, "-p", strconv.Itoa(instanceapi.PostgresPort),
		"-U", "postgres", "-d", "app", "-qtAc", "SELECT id FROM "+table)
	if err != nil {
		return nil // not replayed yet
	}
	var ids []int
	for _, f := range strings.Fields(out) {
		if id, err := strconv.Atoi(f); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// settledIDs reads the writer's ids on an instance once two reads two
// seconds apart agree: what it received is replayed.
func settledIDs(t *testing.T, ns, pod string) []int {
	t.Helper()
	var ids []int
	framework.Eventually(t, time.Minute, pod+" replaying all it received", func(context.Context) (bool, error) {
		before := replicaIDs(t, ns, pod)
		time.Sleep(2 * time.Second)
		ids = replicaIDs(t, ns, pod)
		return len(ids) == len(before), nil // none at all: the table itself was never archived
	})
	return ids
}

// execWrite tries a write on an instance, through its socket.
func execWrite(ns, pod string) error {
	_, _, err := cluster.Exec(context.Background(), ns, pod, "postgres", "psql", "-h", instanceapi.RunDir, "-p", strconv.Itoa(instanceapi.PostgresPort),
		"-U", "postgres", "-d", "app", "-v", "ON_ERROR_STOP=1", "-qtAc", "INSERT INTO acks VALUES (-2)")
	return err
}

// ackTime is when the writer's id was acknowledged.
func ackTime(w framework.WriterResult, id int) time.Time {
	if i := slices.Index(w.Acked, id); i >= 0 {
		return w.Times[i]
	}
	return time.Time{}
}

// copySecret copies a Secret (only keys, when given) to another namespace
// and name, as an operator of two clusters would.
func copySecret(t *testing.T, fromNS, from, toNS, to string, keys []string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: fromNS, Name: from}, s); err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	for k, v := range s.Data {
		if keys == nil || slices.Contains(keys, k) {
			data[k] = string(v)
		}
	}
	secret(t, toNS, to, data)
}

// A planned switch between regions loses nothing: region A's Database
// takes writes while region B's follows its archive alone; A is demoted
// (spec.replica set on it, B as its source) while an application writes
// to it, and B is promoted with A's demotion token. Every write A
// acknowledged is on B, though B never streamed: A shipped the segment
// holding its shutdown checkpoint. A then follows B, and the switch back
// (B demoted under its writer, A promoted with B's token) loses nothing
// either.
func TestPlannedSwitchBetweenRegionsLosesNothing(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	regionA, regionB := restrictedNamespace(t), restrictedNamespace(t)
	cluster.ReserveCPU(t, regionA, 200)
	cluster.ReserveCPU(t, regionB, 200)
	minioInCluster(t, regionA)
	endpoint := fmt.Sprintf("minio.%s.svc.cluster.local:9000", regionA)
	storage := func(prefix string) v1alpha1.BackupStorage {
		return v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: endpoint, Bucket: "wal", Insecure: true, Prefix: prefix,
			CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}}
	}
	backup := func(db *v1alpha1.Database) {
		db.Spec.Backup = &v1alpha1.DatabaseBackupPolicy{Storage: storage("")}
	}
	createDatabase(t, regionA, "orders", backup)
	waitDatabase(t, regionA, "orders", 4*time.Minute, "archiving WAL", func(db *v1alpha1.Database) bool {
		return meta.IsStatusConditionTrue(db.Status.Conditions, v1alpha1.ConditionContinuousArchiving) && isReady(1, "")(db)
	})
	waitBackup(t, regionA, "orders-backup", 4*time.Minute, "a base backup", func(b *v1alpha1.DatabaseBackup) bool { return len(b.Status.Backups) == 1 })
	copySecret(t, regionA, "s3", regionB, "s3", nil)
	copySecret(t, regionA, "orders-backup-series-key", regionB, "orders-series-key", nil)
	createDatabase(t, regionB, "orders", func(db *v1alpha1.Database) {
		backup(db)
		db.Spec.Replica = &v1alpha1.DatabaseReplica{Enabled: true, Source: v1alpha1.ReplicaSource{Storage: storage(regionA + "/orders-backup"),
			SeriesKeySecretRef: v1alpha1.SecretKeyRef{Name: "orders-series-key"}}}
	})
	waitDatabase(t, regionB, "orders", 4*time.Minute, "following A's archive", func(db *v1alpha1.Database) bool {
		return db.Status.Phase == v1alpha1.DatabasePhaseReplica && db.Status.ReadyInstances == 1 && db.Status.Replica != nil && db.Status.Replica.PromotableLSN != ""
	})
	// What A needs to follow B once B is promoted.
	framework.Eventually(t, 2*time.Minute, "B's series key", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: regionB, Name: "orders-backup-series-key"}, &corev1.Secret{})
		return err == nil, nil
	})
	copySecret(t, regionB, "orders-backup-series-key", regionA, "orders-b-series-key", nil)

	psqlPod(t, regionA, "psql", "orders")
	writer := cluster.StartWriter(t, regionA, "psql", "client", "host=orders-rw."+regionA+".svc.cluster.local user=app dbname=app connect_timeout=2", "acks")
	framework.Eventually(t, time.Minute, "writes acknowledged", func(context.Context) (bool, error) {
		return len(replicaIDs(t, regionA, "orders-0")) > 50, nil
	})

	// The switch: A demoted under its writer, then B promoted with A's token.
	switched := time.Now()
	updateDatabase(t, regionA, "orders", func(db *v1alpha1.Database) {
		db.Spec.Replica = &v1alpha1.DatabaseReplica{Enabled: true, Source: v1alpha1.ReplicaSource{Storage: storage(regionB + "/orders-backup"),
			SeriesKeySecretRef: v1alpha1.SecretKeyRef{Name: "orders-b-series-key"}}}
	})
	a := waitDatabase(t, regionA, "orders", 2*time.Minute, "demoted, with a token", func(db *v1alpha1.Database) bool {
		return db.Status.Replica != nil && db.Status.Replica.DemotionToken != ""
	})
	token := a.Status.Replica.DemotionToken
	writes := writer.Stop(t)
	t.Logf("A demoted in %s; token %s; %d writes acknowledged by A", time.Since(switched).Round(100*time.Millisecond), token, len(writes.Acked))
	t.Log(plugin(t, regionB, "promote", "orders", "--demotion-token", token))
	b := waitDatabase(t, regionB, "orders", 3*time.Minute, "promoted", isReady(1, ""))
	t.Logf("planned switch: B serving %s after A's demotion was asked", time.Since(switched).Round(100*time.Millisecond))
	if missing := writes.Lost(settledIDs(t, regionB, b.Status.Primary)); len(missing) > 0 {
		t.Fatalf("B lacks %d of A's %d acknowledged writes: %v", len(missing), len(writes.Acked), missing[:min(10, len(missing))])
	}
	t.Logf("B holds all %d writes A acknowledged", len(writes.Acked))

	// A follows B: a write on B reaches A's instance once B archives it.
	psqlPod(t, regionB, "psql", "orders")
	sql(t, regionB, "psql", "orders-rw", "INSERT INTO acks VALUES (-1)")
	cluster.ExecOK(t, regionB, b.Status.Primary, "postgres", "psql", "-h", instanceapi.RunDir, "-p", strconv.Itoa(instanceapi.PostgresPort),
		"-U", "postgres", "-qtAc", "SELECT pg_switch_wal()")
	framework.Eventually(t, 3*time.Minute, "A replaying B's write", func(context.Context) (bool, error) {
		return slices.Contains(replicaIDs(t, regionA, "orders-0"), -1), nil
	})
	if err := execWrite(regionA, "orders-0"); err == nil {
		t.Fatal("the demoted Database took a write")
	}
	a = waitDatabase(t, regionA, "orders", time.Minute, "following B", func(db *v1alpha1.Database) bool {
		c := meta.FindStatusCondition(db.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == v1alpha1.ReasonFollowingSource && db.Status.Phase == v1alpha1.DatabasePhaseReplica
	})
	t.Logf("A: %s", meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady).Message)

	// And back: B demoted under its own writer, A promoted with B's token.
	back := cluster.StartWriter(t, regionB, "psql", "client", "host=orders-rw."+regionB+".svc.cluster.local user=app dbname=app connect_timeout=2", "acks_back")
	framework.Eventually(t, time.Minute, "writes acknowledged by B", func(context.Context) (bool, error) {
		return len(replicaIDsOf(t, regionB, b.Status.Primary, "acks_back")) > 20, nil
	})
	updateDatabase(t, regionB, "orders", func(db *v1alpha1.Database) { db.Spec.Replica.Enabled, db.Spec.Replica.PromotionToken = true, "" })
	b = waitDatabase(t, regionB, "orders", 2*time.Minute, "B demoted, with a token", func(db *v1alpha1.Database) bool {
		return db.Status.Replica != nil && db.Status.Replica.DemotionToken != ""
	})
	backWrites := back.Stop(t)
	t.Log(plugin(t, regionA, "promote", "orders", "--demotion-token", b.Status.Replica.DemotionToken))
	a = waitDatabase(t, regionA, "orders", 3*time.Minute, "A promoted again", isReady(1, ""))
	framework.Eventually(t, 30*time.Second, "A holding every write B acknowledged", func(context.Context) (bool, error) {
		return len(backWrites.Lost(replicaIDsOf(t, regionA, a.Status.Primary, "acks_back"))) == 0, nil
	})
	t.Logf("switched back: A holds all %d writes B acknowledged", len(backWrites.Acked))
	sql(t, regionA, "psql", "orders-rw", "INSERT INTO acks VALUES (-5)")
	cluster.ExecOK(t, regionA, a.Status.Primary, "postgres", "psql", "-h", instanceapi.RunDir, "-p", strconv.Itoa(instanceapi.PostgresPort),
		"-U", "postgres", "-qtAc", "SELECT pg_switch_wal()")
	framework.Eventually(t, 3*time.Minute, "B replaying A's write", func(context.Context) (bool, error) {
		return slices.Contains(replicaIDs(t, regionB, "orders-0"), -5), nil
	})
}
