//go:build e2e

package e2e

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// Real partitions of the primary on the real node: nftables rules in the
// primary pod's network namespace, one shape at a time, with a writer
// through <db>-rw and a second client that writes to the primary's pod IP
// directly (the application that never looks at Services). In every shape
// no write is acknowledged by the old primary once the lease named another
// instance, and with required durability no acknowledged write is lost.
func TestPartitionedPrimaryNeverSplitsBrain(t *testing.T) {
	requireRealNode(t)
	ns := cluster.Namespace(t)
	const db = "split"
	createDatabase(t, ns, db, func(d *v1alpha1.Database) {
		d.Spec.Instances = ptr.To[int32](3)
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{
			Number: 1, DataDurability: v1alpha1.DataDurabilityRequired}}
	})
	waitDatabase(t, ns, db, 5*time.Minute, "3 instances ready and streaming", framework.Whole(3))
	for _, p := range []string{"psql", "direct"} {
		cluster.RunPod(t, framework.PSQLPod(ns, p, postgresImage, db))
	}
	rw := "host=" + db + "-rw." + ns + ".svc.cluster.local user=app dbname=app connect_timeout=2"
	w := cluster.StartWriter(t, ns, "psql", "client", rw, "acks")
	for _, s := range framework.PartitionShapes {
		r := cluster.PartitionRound(t, ns, db, 3, s, w, "direct")
		if r.SplitAcks > 0 {
			t.Errorf("%s: %d writes acknowledged by the old primary %s after the lease named %s", s.Name, r.SplitAcks, r.OldPrimary, r.NewPrimary)
		}
		if !s.FailsOver && r.NewPrimary != r.OldPrimary {
			t.Errorf("%s: failed over from %s to %s, though the primary could renew its lease", s.Name, r.OldPrimary, r.NewPrimary)
		}
		if s.FailsOver && r.NewPrimary == r.OldPrimary {
			t.Errorf("%s: no failover from %s", s.Name, r.OldPrimary)
		}
	}
	res := w.Stop(t)
	if lost := res.Lost(cluster.ReadIDs(t, ns, "psql", "client", rw, "acks")); len(lost) > 0 {
		t.Errorf("with required durability, %d acknowledged writes were lost: %v", len(lost), lost)
	}
}
