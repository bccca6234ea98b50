//go:build e2e && bench

// Package failover is the failover benchmark (make bench-failover): on the
// real node, a writer makes a new connection to <db>-rw for every write
// (each attempt capped at 0.5 s, about ten a second) while the primary is
// deleted, frozen, has its postgres killed, is switched over, or restarts
// for a changed setting, and while it is cut off by real partitions
// (framework.PartitionShapes) with a second client writing to its pod IP.
// It prints the longest write gap of each round, p50 and p95 per fault,
// the acknowledged writes lost and the time until every instance is ready
// again, with the writer's gap in a quiet stretch as the floor. Figures,
// not pass or fail, except two promises: with synchronous replication
// required, no acknowledged write is lost; and no old primary acknowledges
// a write once the lease named another (partition_split_acks=0).
package failover

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

const postgresImage = "docker.io/library/postgres:" + postgresMajor

// postgresMajor is the PostgreSQL the benchmark runs.
const postgresMajor = "17"

var cluster *framework.Cluster

func TestMain(m *testing.M) {
	var err error
	if cluster, err = framework.Connect(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// fault does something to the primary and returns what undoes it (nil:
// nothing). settled, when set, says the Database finished answering it.
type fault struct {
	name    string
	do      func(t *testing.T, ns, db, primary string) func()
	settled func(before, now *v1alpha1.Database) bool
}

// patchDatabase changes the named Database with a merge patch.
func patchDatabase(t *testing.T, ns, name string, change func(*v1alpha1.Database)) {
	d := &v1alpha1.Database{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	change(d)
	if err := cluster.Client.Patch(context.Background(), d, patch); err != nil {
		t.Fatal(err)
	}
}

var faults = []fault{
	{name: "delete", do: func(t *testing.T, ns, _, primary string) func() {
		ctx := context.Background()
		key := client.ObjectKey{Namespace: ns, Name: primary}
		old := &corev1.Pod{}
		if err := cluster.Client.Get(ctx, key, old); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil {
			t.Fatal(err)
		}
		// The round is whole only with the deleted pod replaced: until then
		// the Database's status can still count it ready (it relays while
		// it terminates), and a next round would delete a primary promoted
		// a moment ago, with its old primary still gone: a double failure.
		framework.Eventually(t, 2*time.Minute, "the deleted pod replaced", func(context.Context) (bool, error) {
			now := &corev1.Pod{}
			err := cluster.Client.Get(ctx, key, now)
			return err == nil && now.UID != old.UID, nil
		})
		return nil
	}},
	{name: "freeze", do: func(t *testing.T, ns, _, primary string) func() {
		return cluster.Freeze(t, ns, primary, "postgres")
	}},
	{name: "kill", do: func(t *testing.T, ns, _, primary string) func() {
		cluster.KillPostgres(t, ns, primary)
		return nil
	}},
	{name: "switchover", do: func(t *testing.T, ns, db, _ string) func() {
		// Second precision: one request per second at most.
		time.Sleep(time.Second)
		patchDatabase(t, ns, db, func(d *v1alpha1.Database) {
			metav1.SetMetaDataAnnotation(&d.ObjectMeta, v1alpha1.AnnotationSwitchoverRequested, time.Now().UTC().Format(time.RFC3339))
		})
		return nil
	}, settled: func(before, now *v1alpha1.Database) bool {
		// Without this a round could end before the switchover began, and
		// the next one start while it runs.
		return now.Status.Primary != before.Status.Primary && now.Status.LastSwitchover != nil &&
			now.Status.LastSwitchover.Result == v1alpha1.SwitchoverSucceeded && now.Status.LastSwitchover.From == before.Status.Primary
	}},
	// A planned restart: a setting that needs one. Rounds alternate between
	// lowering it (postgres restarts in place in the primary first, then in
	// the replicas; the primary stays) and raising it back (replicas first,
	// then the primary hands over; its demotion restarted it).
	{name: "restart", do: func(t *testing.T, ns, db, _ string) func() {
		patchDatabase(t, ns, db, func(d *v1alpha1.Database) {
			n := 63
			if d.Spec.Parameters["max_locks_per_transaction"] == "63" {
				n = 64
			}
			d.Spec.Parameters = map[string]string{"max_locks_per_transaction": strconv.Itoa(n)}
		})
		return nil
	}, settled: func(before, now *v1alpha1.Database) bool {
		return now.Status.ObservedGeneration > before.Generation &&
			meta.IsStatusConditionFalse(now.Status.Conditions, v1alpha1.ConditionPendingRestart) &&
			meta.IsStatusConditionFalse(now.Status.Conditions, v1alpha1.ConditionProgressing)
	}},
	// A minor upgrade: a new image of the same major version, rolled the
	// same way. Rounds alternate between two tags of one image.
	{name: "upgrade", do: func(t *testing.T, ns, db, _ string) func() {
		patchDatabase(t, ns, db, func(d *v1alpha1.Database) {
			if d.Spec.Image == nextImage {
				d.Spec.Image = ""
			} else {
				d.Spec.Image = nextImage
			}
		})
		return nil
	}, settled: func(before, now *v1alpha1.Database) bool {
		want := nextImage
		if before.Spec.Image == nextImage {
			want = postgresImage
		}
		return now.Status.ObservedGeneration > before.Generation && now.Status.Primary != before.Status.Primary &&
			strings.HasSuffix(now.Status.CurrentImage, strings.TrimPrefix(want, "docker.io/library/")) &&
			meta.IsStatusConditionFalse(now.Status.Conditions, v1alpha1.ConditionProgressing)
	}},
}

// nextImage is postgresImage under another tag: a minor upgrade to the
// operator, the same binaries to the benchmark.
const nextImage = "localhost/postgres:" + postgresMajor + "-bench-next"

// figures are one configuration's results.
type figures struct {
	gaps, ready map[string][]time.Duration
	lost        int
	floor       time.Duration
	// partitions counts the partition rounds, splitAcks the writes an old
	// primary acknowledged after the lease named another instance, and
	// partitionGaps the -rw write gaps of the rounds that failed over.
	partitions, splitAcks int
	partitionGaps         []time.Duration
	// pooled is what a writer through the pool saw (poolerRounds).
	pooled *pooledFigures
}

// add is f and g together; the floor is the higher one.
func (f figures) add(g figures) figures {
	out := figures{gaps: map[string][]time.Duration{}, ready: map[string][]time.Duration{}, lost: f.lost + g.lost, floor: max(f.floor, g.floor),
		partitions: f.partitions + g.partitions, splitAcks: f.splitAcks + g.splitAcks, partitionGaps: append(slices.Clone(f.partitionGaps), g.partitionGaps...),
		pooled: f.pooled.add(g.pooled)}
	for _, x := range []figures{f, g} {
		for k, v := range x.gaps {
			out.gaps[k] = append(out.gaps[k], v...)
		}
		for k, v := range x.ready {
			out.ready[k] = append(out.ready[k], v...)
		}
	}
	return out
}

func TestBenchFailover(t *testing.T) {
	if cluster.Mode != framework.ModeReal {
		t.Skip("needs the real node: kwok runs no PostgreSQL")
	}
	rounds := envInt("BENCH_ROUNDS", 5)
	type config struct {
		instances int32
		sync      bool
	}
	type runSpec struct {
		config
		rounds int
		faults []fault
		// partitions: the partition rounds run too (no filter, or one
		// that names "partition"); pooler, the pooler rounds (the same).
		partitions, pooler bool
	}
	// e.g. "2,3s,3s:10@delete+freeze": 2 instances async and 3 with sync
	// required, every fault and the partition rounds BENCH_ROUNDS times;
	// then 3 sync again, pod delete and freeze 10 times each ("partition"
	// in a filter runs the partition rounds). Figures of equal
	// configurations add up.
	spec := cmp.Or(os.Getenv("BENCH_CONFIGS"), "2,3,3s")
	var runs []runSpec
	var configs []config
	for _, c := range strings.Split(spec, ",") {
		c, only, _ := strings.Cut(c, "@")
		c, r, _ := strings.Cut(c, ":")
		n, _ := strconv.Atoi(strings.TrimSuffix(c, "s"))
		rs := runSpec{config: config{int32(n), strings.HasSuffix(c, "s")}, rounds: rounds, faults: faults, partitions: true, pooler: true}
		if r, err := strconv.Atoi(r); err == nil && r > 0 {
			rs.rounds = r
		}
		if only != "" {
			names := strings.Split(only, "+")
			rs.partitions = slices.Contains(names, "partition")
			rs.pooler = slices.Contains(names, "pooler")
			rs.faults = slices.DeleteFunc(slices.Clone(faults), func(f fault) bool { return !slices.Contains(names, f.name) })
		}
		runs = append(runs, rs)
		if !slices.Contains(configs, rs.config) {
			configs = append(configs, rs.config)
		}
	}
	cluster.TagImage(t, postgresImage, nextImage)
	results := map[config]figures{}
	for _, rs := range runs {
		name := fmt.Sprintf("instances=%d sync=%v", rs.instances, rs.sync)
		t.Run(name, func(t *testing.T) {
			f := run(t, rs.instances, rs.sync, rs.rounds, rs.faults, rs.partitions, rs.pooler)
			if rs.sync && f.lost > 0 {
				// Not a figure: synchronous replication promises this.
				t.Errorf("sync required lost %d acknowledged writes", f.lost)
			}
			results[rs.config] = results[rs.config].add(f)
		})
	}

	fmt.Printf("\nfailover benchmark (%s): %d round(s) per fault unless a configuration says; write gap = longest stretch without an acknowledged write\n", spec, rounds)
	fmt.Printf("%-22s %-11s %6s %8s %8s %9s %8s\n", "configuration", "fault", "rounds", "gap p50", "gap p95", "ready p95", "floor")
	for _, c := range configs {
		f := results[c]
		for _, fl := range faults {
			if len(f.gaps[fl.name]) == 0 {
				continue
			}
			fmt.Printf("%-22s %-11s %6d %7.2fs %7.2fs %8.2fs %7.2fs\n", fmt.Sprintf("%d instances, %s", c.instances, mode(c.sync)), fl.name,
				len(f.gaps[fl.name]), pct(f.gaps[fl.name], 50).Seconds(), pct(f.gaps[fl.name], 95).Seconds(), pct(f.ready[fl.name], 95).Seconds(), f.floor.Seconds())
		}
	}
	// One line per instance count: the gaps of async replication, or of
	// sync when only that ran; the writes lost in each mode.
	for _, n := range []int32{2, 3} {
		async, hasAsync := results[config{n, false}]
		syncF, hasSync := results[config{n, true}]
		if !hasAsync && !hasSync {
			continue
		}
		lost := func(f figures, ok bool) string {
			if !ok {
				return "n/a"
			}
			return strconv.Itoa(f.lost)
		}
		gaps, gapsMode := async, "async"
		if !hasAsync {
			gaps, gapsMode = syncF, "sync"
		}
		p95 := func(name string) float64 { return pct(gaps.gaps[name], 95).Seconds() }
		both := async.add(syncF)
		split, partitionGap := "n/a", "n/a"
		if both.partitions > 0 {
			split, partitionGap = strconv.Itoa(both.splitAcks), fmt.Sprintf("%.2f", pct(both.partitionGaps, 95).Seconds())
		}
		fmt.Printf("BENCH failover instances=%d delete_p95_s=%.2f freeze_p95_s=%.2f kill_p95_s=%.2f switchover_p95_s=%.2f restart_p95_s=%.2f upgrade_p95_s=%.2f lost_async=%s lost_sync=%s partition_split_acks=%s partition_gap_s=%s %s gaps=%s floor_s=%.2f\n",
			n, p95("delete"), p95("freeze"), p95("kill"), p95("switchover"), p95("restart"), p95("upgrade"),
			lost(async, hasAsync), lost(syncF, hasSync), split, partitionGap, both.pooled.fields(), gapsMode, gaps.floor.Seconds())
	}
}

func mode(sync bool) string {
	if sync {
		return "sync required"
	}
	return "async"
}

// run measures every fault rounds times on one Database.
func run(t *testing.T, instances int32, sync bool, rounds int, faults []fault, partitions, pooler bool) figures {
	ctx := context.Background()
	ns := cluster.Namespace(t)
	const db = "bench"
	d := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db}, Spec: v1alpha1.DatabaseSpec{
		Version: postgresMajor, Instances: ptr.To(instances), DeletionPolicy: v1alpha1.DatabaseDeletionDelete}}
	if sync {
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{
			Number: 1, DataDurability: v1alpha1.DataDurabilityRequired}}
	}
	if err := cluster.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	whole := func() (*v1alpha1.Database, bool) {
		got := &v1alpha1.Database{}
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
			return got, false
		}
		streaming := 0
		for _, s := range got.Status.InstanceStatuses {
			if s.Role == "replica" && s.Streaming {
				streaming++
			}
		}
		return got, got.Status.Ready && got.Status.ReadyInstances == instances && streaming == int(instances)-1
	}
	start := time.Now()
	framework.Eventually(t, 5*time.Minute, "every instance ready and streaming", func(context.Context) (bool, error) {
		_, ok := whole()
		return ok, nil
	})
	t.Logf("%d instances ready in %s", instances, time.Since(start).Round(time.Second))
	cluster.RunPod(t, framework.PSQLPod(ns, "psql", postgresImage, db))
	rw := "host=" + db + "-rw." + ns + ".svc.cluster.local user=app dbname=app connect_timeout=2"
	w := cluster.StartWriter(t, ns, "psql", "client", rw, "acks")

	// The floor: the writer's longest gap with nothing going on.
	quiet := time.Now()
	time.Sleep(5 * time.Second)
	f := figures{gaps: map[string][]time.Duration{}, ready: map[string][]time.Duration{}}
	f.floor, _ = w.Read(t).GapAround(quiet, time.Now())

	for _, fl := range faults {
		for r := range rounds {
			cur, _ := whole()
			at := time.Now()
			undo := fl.do(t, ns, db, cur.Status.Primary)
			// Writes come back, and every instance is whole again.
			var writable time.Time
			lastSaid := time.Now()
			framework.Eventually(t, 3*time.Minute, fl.name+": writes back", func(context.Context) (bool, error) {
				if time.Since(lastSaid) > 15*time.Second {
					// A round that takes long says what the operator sees.
					lastSaid = time.Now()
					now, _ := whole()
					ready := meta.FindStatusCondition(now.Status.Conditions, v1alpha1.ConditionReady)
					if ready != nil {
						t.Logf("%s round %d after %s: primary %q, Ready %s/%s: %s; instances %+v", fl.name, r+1,
							time.Since(at).Round(time.Second), now.Status.Primary, ready.Status, ready.Reason, ready.Message, now.Status.InstanceStatuses)
					}
				}
				if undo != nil {
					// A frozen primary stays frozen until another took over.
					if now, _ := whole(); now.Status.Primary != cur.Status.Primary && now.Status.Primary != "" {
						undo()
						undo = nil
					}
				}
				if writable.IsZero() && w.Read(t).WrittenSince(at) {
					writable = time.Now()
				}
				return !writable.IsZero() && undo == nil, nil
			})
			framework.Eventually(t, 5*time.Minute, fl.name+": whole again", func(context.Context) (bool, error) {
				now, ok := whole()
				return ok && (fl.settled == nil || fl.settled(cur, now)), nil
			})
			ready := time.Since(at)
			time.Sleep(2 * time.Second) // a quiet stretch closes the round's gap
			rec := w.Read(t)
			gap, began := rec.GapAround(at, time.Now())
			f.gaps[fl.name] = append(f.gaps[fl.name], gap)
			f.ready[fl.name] = append(f.ready[fl.name], ready)
			t.Logf("%s round %d (primary %s): write gap %s from %s, whole again after %s; failed attempts in it:%s", fl.name, r+1, cur.Status.Primary,
				gap.Round(10*time.Millisecond), began.UTC().Format("15:04:05.000"), ready.Round(100*time.Millisecond),
				rec.FailuresIn(began, began.Add(gap)))
			if gap > time.Second {
				// Over the goal: what each instance did, to tell why.
				for i := range instances {
					t.Logf("%s-%d around the gap:\n%s", db, i, logsBetween(cluster.PodLogs(ctx, ns, fmt.Sprintf("%s-%d", db, i), "postgres",
						began.Add(-time.Second)), began.Add(-time.Second), began.Add(gap+time.Second)))
				}
				var mine []string
				for line := range strings.Lines(logsBetween(cluster.OperatorLogs(ctx, began.Add(-time.Second)), began.Add(-time.Second), began.Add(gap+time.Second))) {
					if strings.Contains(line, ns) {
						mine = append(mine, strings.TrimRight(line, "\n"))
					}
				}
				t.Logf("the operator around the gap:\n%s", strings.Join(mine, "\n"))
			}
		}
	}
	if partitions {
		f = partitionRounds(t, ns, db, instances, w, f)
	}
	if pooler {
		f = poolerRounds(t, ns, db, rounds, f, whole)
	}
	res := w.Stop(t)
	lost := res.Lost(cluster.ReadIDs(t, ns, "psql", "client", rw, "acks"))
	f.lost = len(lost)
	t.Logf("writer: %s; %d acknowledged writes lost %v", res, len(lost), lost)
	_ = cluster.Client.Delete(ctx, d)
	return f
}

// partitionRounds cuts the primary off in each of framework.PartitionShapes,
// BENCH_PARTITION_ROUNDS times (default 1; 0 for none), with a client that
// writes to the primary's pod IP directly, and adds what they did to f.
func partitionRounds(t *testing.T, ns, db string, instances int32, w *framework.Writer, f figures) figures {
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("BENCH_PARTITION_ROUNDS")); err == nil {
		rounds = n
	}
	if rounds <= 0 {
		return f
	}
	cluster.RunPod(t, framework.PSQLPod(ns, "direct", postgresImage, db))
	for range rounds {
		for _, s := range framework.PartitionShapes {
			r := cluster.PartitionRound(t, ns, db, instances, s, w, "direct")
			f.partitions++
			f.splitAcks += r.SplitAcks
			if s.FailsOver {
				f.partitionGaps = append(f.partitionGaps, r.Gap)
			}
			if r.SplitAcks > 0 {
				// Not a figure: the lease promises this.
				t.Errorf("%s: %d writes acknowledged by the old primary %s after the lease named %s", s.Name, r.SplitAcks, r.OldPrimary, r.NewPrimary)
			}
		}
	}
	return f
}

// logsBetween keeps the timestamped log lines written in [from, to].
func logsBetween(log string, from, to time.Time) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		stamp, _, _ := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err == nil && (at.Before(from) || at.After(to)) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
