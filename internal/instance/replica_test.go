package instance_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// A replica Database, on real PostgreSQL and a real API server: the
// source archives (sealed) to a directory; the replica's instance, whose
// lease names the source outside (instanceapi.ExternalHolder), restores
// the source's base backup and replays its archive as it grows, reporting
// how far it has come. Promoted (the lease moved to it, as failover does
// once spec.replica.enabled is false), it claims the source's archive and
// takes writes; the source, seeing the claim, stops serving and does not
// start as a primary again; and no other Database can claim the archive.
func TestReplicaDatabaseFollowsItsSourceAndItsPromotionFencesTheSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seal := strings.Repeat("s", 32)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "orders", "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, root)
	st := backup.NewDir(root)
	archive := `{"directory":"` + root + `","prefix":"orders/"}`

	lt := newLeaseTest(t, "orders-0")
	src := lt.instance(0)
	src.extraFlags = append(src.extraFlags, "--"+instanceapi.FlagDatabaseUID, "source-uid")
	src.writeFile("secrets/"+instanceapi.SecretArchiveSeriesKey, seal)
	src.writeFile("config/"+instanceapi.ArchiveFile, archive)
	src.start("orders-0")
	src.waitReady(90 * time.Second)
	src.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY)")
	src.exec(ctx, "INSERT INTO items SELECT generate_series(1, 100)")
	conn := wal.Source{Host: "127.0.0.1", Port: src.pgPort, User: "streaming_replica", Password: "repl-secret", BinDir: testpg.BinDir(t)}
	if _, err := wal.TakeBase(ctx, conn, st, "orders/", "b1", backup.Keys{Seal: []byte(seal)}); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, root) // the base backup, written by the test, to the instances' user
	src.exec(ctx, "INSERT INTO items SELECT generate_series(101, 200)")
	src.superuser("SELECT pg_switch_wal()")

	// The replica Database: a namespace of its own, its lease held by the source.
	dlt := &leaseTest{t: t, env: lt.env, key: client.ObjectKey{Namespace: lt.env.Namespace(t), Name: lt.key.Name}}
	if err := lt.env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: dlt.key.Namespace, Name: dlt.key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(instanceapi.ExternalHolder)}}); err != nil {
		t.Fatal(err)
	}
	dr := dlt.instance(0)
	dr.extraFlags = append(dr.extraFlags, "--"+instanceapi.FlagDatabaseUID, "replica-uid")
	dr.writeFile("secrets/"+instanceapi.SourceFiles.SeriesKey, seal)
	dr.writeFile("config/"+instanceapi.ReplicaSourceFile, archive)
	dr.start("orders-0")
	dr.waitReady(90 * time.Second)
	rows := func(in *instance) string {
		n, _ := in.tryQuery(ctx, "SELECT count(*)::text FROM items")
		return n
	}
	eventually(t, 60*time.Second, func() bool { return rows(dr) == "200" }, "the replica replaying the archive to 200 rows")
	if err := dr.execWithin(ctx, 5*time.Second, "INSERT INTO items VALUES (9999)"); err == nil {
		t.Fatal("a replica Database's instance took a write before its promotion")
	}
	src.exec(ctx, "INSERT INTO items SELECT generate_series(201, 300)")
	src.superuser("SELECT pg_switch_wal()")
	eventually(t, 60*time.Second, func() bool { return rows(dr) == "300" }, "the replica following the archive as it grows")
	s := dr.status()
	if s.Role != instanceapi.RoleReplica || s.Source == nil || s.Source.EndLSN == "" || s.Source.ReplayedTime == nil || s.Source.Streaming {
		t.Fatalf("the replica reports no progress against its source: %+v", s)
	}
	if end, _ := postgres.ParseLSN(s.Source.EndLSN); end < lsnOf(t, s.LSN) {
		t.Fatalf("the source's end %s is before what the replica replayed, %s", s.Source.EndLSN, s.LSN)
	}
	t.Logf("following: replayed %s, source end %s, last commit %s", s.LSN, s.Source.EndLSN, s.Source.ReplayedTime)

	// The promotion: the lease moves to the instance, as failover moves it.
	dlt.transfer("orders-0")
	eventually(t, 60*time.Second, func() bool { return promote(t, dr, apiToken) == 200 }, "the replica's promotion")
	dr.exec(ctx, "INSERT INTO items VALUES (1000)")
	c, err := wal.PromotionOf(ctx, st, "orders/")
	if err != nil || c == nil || c.DatabaseUID != "replica-uid" || c.Pod != "orders-0" {
		t.Fatalf("the source's archive holds no claim of the promoted replica: %+v, %v", c, err)
	}
	// The claim is on the lease, and the promotion came sourceClaimWait
	// (11 s) after it: time for the source to see it first.
	claimed := dlt.get().Annotations[instanceapi.AnnotationSourceClaim]
	at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(claimed, instanceapi.SourceClaimed))
	if err != nil || !at.Equal(c.Time) {
		t.Fatalf("the lease records the claim as %q, the archive at %s", claimed, c.Time)
	}
	if promotedAt := time.Now(); promotedAt.Sub(at) < 11*time.Second {
		t.Fatalf("promoted %s after the claim, before the source could see it", promotedAt.Sub(at))
	}
	if dr.status().Source != nil {
		t.Fatal("the promoted instance still reports following its source")
	}

	// The source stopped serving before the promotion ended (it had
	// sourceClaimWait to see the claim), and stays down.
	if s := src.status(); s.Superseded == "" || src.execWithin(ctx, 3*time.Second, "INSERT INTO items VALUES (2000)") == nil {
		t.Fatalf("the source still serves after the replica's promotion: %+v", s)
	}
	eventually(t, 30*time.Second, func() bool {
		s := src.status()
		return s.Phase != instanceapi.PhaseRunning && strings.Contains(s.Message, "does not start as its primary")
	}, "the source refusing to start as primary")
	t.Logf("source: %s", src.status().Message)

	// Nobody else may claim the archive; the same Database may again.
	other := instanceapi.PromotionClaim{Database: "dr/other", DatabaseUID: "other-uid", Pod: "other-0", Time: time.Now()}
	if err := wal.ClaimPromotion(ctx, st, "orders/", other); !errors.Is(err, wal.ErrPromotedElsewhere) {
		t.Fatalf("a second Database's claim: %v, want ErrPromotedElsewhere", err)
	}
	again := instanceapi.PromotionClaim{Database: "dr/orders", DatabaseUID: "replica-uid", Pod: "orders-1", Time: time.Now()}
	if err := wal.ClaimPromotion(ctx, st, "orders/", again); err != nil {
		t.Fatalf("the promoted Database's claim again: %v", err)
	}
}

func lsnOf(t *testing.T, s string) uint64 {
	t.Helper()
	lsn, ok := postgres.ParseLSN(s)
	if !ok {
		t.Fatalf("%q is not an LSN", s)
	}
	return lsn
}
