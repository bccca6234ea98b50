//go:build e2e && bench

package failover

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// pooledFigures are what a writer through the pool (transaction mode, one
// connection kept) saw: failed writes and added latency during
// switchovers, and write gaps around a primary's pod delete.
type pooledFigures struct {
	switchovers, deletes int
	errors               int
	// added is each write's latency during a switchover above the
	// writer's median in a quiet stretch.
	added []time.Duration
	gaps  []time.Duration
}

func (p *pooledFigures) add(q *pooledFigures) *pooledFigures {
	if p == nil {
		return q
	}
	if q == nil {
		return p
	}
	return &pooledFigures{switchovers: p.switchovers + q.switchovers, deletes: p.deletes + q.deletes, errors: p.errors + q.errors,
		added: append(slices.Clone(p.added), q.added...), gaps: append(slices.Clone(p.gaps), q.gaps...)}
}

// fields are the BENCH line's pooler fields (goals: no error, p99 added
// latency within 1,000 ms, a failover gap no worse than delete_p95_s).
func (p *pooledFigures) fields() string {
	if p == nil {
		return "pooler_switchover_errors=n/a pooler_switchover_p99_ms=n/a pooler_failover_gap_s=n/a"
	}
	return fmt.Sprintf("pooler_switchover_errors=%d pooler_switchover_p99_ms=%d pooler_failover_gap_s=%.2f",
		p.errors, pct(p.added, 99).Milliseconds(), pct(p.gaps, 95).Seconds())
}

// poolerRounds puts a pool in front of db and, with a writer through it
// (as an application of the pool: one connection, transaction mode),
// switches over rounds times and deletes the primary's pod rounds times.
func poolerRounds(t *testing.T, ns, db string, rounds int, f figures, whole func() (*v1alpha1.Database, bool)) figures {
	ctx := context.Background()
	patchDatabase(t, ns, db, func(d *v1alpha1.Database) { d.Spec.Pooler = &v1alpha1.PoolerSpec{Instances: ptr.To[int32](1)} })
	current := func() *v1alpha1.Database {
		d := &v1alpha1.Database{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	framework.Eventually(t, 3*time.Minute, "the pool ready", func(context.Context) (bool, error) {
		return meta.IsStatusConditionTrue(current().Status.Conditions, v1alpha1.ConditionPoolerReady), nil
	})
	cluster.RunPod(t, framework.PSQLPod(ns, "pooled", postgresImage, db))
	conninfo := "host=" + db + "-pooler-rw." + ns + ".svc.cluster.local user=app dbname=app connect_timeout=5"
	w := cluster.StartPooledWriter(t, ns, "pooled", "client", conninfo, "pooled")
	quiet := time.Now()
	time.Sleep(3 * time.Second)
	base := pct(w.Read(t).Latencies(quiet, time.Now()), 50)
	p := &pooledFigures{}
	for _, name := range []string{"switchover", "delete"} {
		fl := faults[slices.IndexFunc(faults, func(x fault) bool { return x.name == name })]
		for r := range rounds {
			before := current()
			at := time.Now()
			fl.do(t, ns, db, before.Status.Primary)
			framework.Eventually(t, 3*time.Minute, "pooler "+name+": done", func(context.Context) (bool, error) {
				now := current()
				return now.Status.Primary != before.Status.Primary && now.Status.Ready &&
					(fl.settled == nil || fl.settled(before, now)) && w.Read(t).WrittenSince(time.Now().Add(-time.Second)), nil
			})
			// Every instance back and streaming before the next round: a
			// primary deleted while its replica still clones is a double
			// failure.
			framework.Eventually(t, 5*time.Minute, "pooler "+name+": whole again", func(context.Context) (bool, error) {
				_, ok := whole()
				return ok, nil
			})
			time.Sleep(2 * time.Second)
			end := time.Now()
			rec := w.Read(t)
			gap, began := rec.GapAround(at, end)
			errs := rec.FailedIn(at, end)
			if name == "switchover" {
				p.switchovers++
				p.errors += errs
				for _, l := range rec.Latencies(at, end) {
					p.added = append(p.added, max(0, l-base))
				}
			} else {
				p.deletes++
				p.gaps = append(p.gaps, gap)
			}
			t.Logf("pooler %s round %d (primary %s): %d failed writes, write gap %s from %s, median latency %s in quiet; failed attempts:%s",
				name, r+1, before.Status.Primary, errs, gap.Round(10*time.Millisecond), began.UTC().Format("15:04:05.000"), base,
				rec.FailuresIn(at, end))
		}
	}
	res := w.Stop(t)
	t.Logf("pooled writer: %s", res)
	f.pooled = f.pooled.add(p)
	return f
}
