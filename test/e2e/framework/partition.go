//go:build e2e

package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Cut says which of a pod's traffic a partition drops, both ways: to and
// from the addresses in Drop, or, with Isolate, everything but loopback and
// the addresses in Keep.
type Cut struct {
	Drop    []string
	Isolate bool
	Keep    []string
}

// partitionTable is the nftables table a partition adds inside the pod's
// network namespace; deleting it heals.
const partitionTable = "daytwo_e2e_partition"

// Partition cuts pod's network inside its own network namespace, entered
// from the host (the real node runs here, and the test is root), with an
// nftables table that drops what cut says. It returns heal, which deletes
// the table; it is idempotent and also a cleanup, so a failed test never
// leaves a partition behind. Established connections are cut too: the rules
// drop packets, not new connections only.
func (c *Cluster) Partition(t *testing.T, ns, pod string, cut Cut) (heal func()) {
	t.Helper()
	netns := c.netns(t, ns, pod)
	var rules []string
	if cut.Isolate {
		keep := "127.0.0.1"
		if len(cut.Keep) > 0 {
			keep = strings.Join(append(cut.Keep, keep), ", ")
		}
		rules = append(rules,
			`chain in { type filter hook input priority -300; policy accept; iifname "lo" accept; ip saddr != { `+keep+` } drop; }`,
			`chain out { type filter hook output priority -300; policy accept; oifname "lo" accept; ip daddr != { `+keep+` } drop; }`)
	} else {
		set := strings.Join(cut.Drop, ", ")
		rules = append(rules,
			`chain in { type filter hook input priority -300; policy accept; ip saddr { `+set+` } drop; }`,
			`chain out { type filter hook output priority -300; policy accept; ip daddr { `+set+` } drop; }`)
	}
	script := fmt.Sprintf("table inet %s {\n%s\n}\n", partitionTable, strings.Join(rules, "\n"))
	nft(t, netns, script, "-f", "-")
	healed := false
	heal = func() {
		if healed {
			return
		}
		healed = true
		if _, err := os.Stat(netns); err != nil {
			return // the pod, and its namespace, are gone
		}
		nft(t, netns, "", "delete", "table", "inet", partitionTable)
	}
	t.Cleanup(heal)
	t.Logf("partitioned %s/%s (%+v)", ns, pod, cut)
	return heal
}

// nft runs nft with args in the network namespace at path, script on stdin.
func nft(t *testing.T, netns, script string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + netns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft %s in %s: %v\n%s\n%s", strings.Join(args, " "), netns, err, out, script)
	}
}

// netns is the network namespace of a pod on this machine, as a path that
// outlives its containers: the pod sandbox's, as the CNI names it under
// /run/netns, found by the namespace of a process of its first container.
// That process's own path (/proc/<pid>/ns/net) is gone once the container
// restarts (a liveness probe that cannot pass an isolated pod kills it),
// and a heal that found it gone left the pod cut off for good: CI failed
// on it.
func (c *Cluster) netns(t *testing.T, ns, pod string) string {
	t.Helper()
	proc := c.processNetns(t, ns, pod)
	var want syscall.Stat_t
	if err := syscall.Stat(proc, &want); err != nil {
		t.Fatalf("the network namespace of %s/%s: %v", ns, pod, err)
	}
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			var st syscall.Stat_t
			p := filepath.Join(dir, e.Name())
			if syscall.Stat(p, &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
				return p
			}
		}
	}
	t.Fatalf("the network namespace of %s/%s (%s) is not under /run/netns", ns, pod, proc)
	return ""
}

// processNetns is the network namespace of a process of pod's first
// container.
func (c *Cluster) processNetns(t *testing.T, ns, pod string) string {
	t.Helper()
	p := &corev1.Pod{}
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
		t.Fatal(err)
	}
	id := c.containerID(t, ns, pod, p.Spec.Containers[0].Name)
	for _, root := range []string{"/sys/fs/cgroup/freezer", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		dir, err := findDir(root, id)
		if err != nil {
			continue
		}
		procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if f := strings.Fields(string(procs)); err == nil && len(f) > 0 {
			return "/proc/" + f[0] + "/ns/net"
		}
	}
	t.Fatalf("no process of %s/%s found for its network namespace", ns, pod)
	return ""
}

// APIServerAddresses are the addresses a pod reaches the API server at:
// the kubernetes Service's cluster IP and its endpoints.
func (c *Cluster) APIServerAddresses(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, svc); err != nil {
		t.Fatal(err)
	}
	addrs := []string{svc.Spec.ClusterIP}
	eps, err := c.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
	}
	return addrs
}

// PodIP is a pod's IP address.
func (c *Cluster) PodIP(t *testing.T, ns, pod string) string {
	t.Helper()
	p := &corev1.Pod{}
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
		t.Fatal(err)
	}
	if p.Status.PodIP == "" {
		t.Fatalf("%s/%s has no IP", ns, pod)
	}
	return p.Status.PodIP
}

// OperatorPodIP is the IP of the operator's pod (real mode).
func (c *Cluster) OperatorPodIP(t *testing.T) string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.Client.List(context.Background(), pods, client.InNamespace(OperatorNamespace),
		client.MatchingLabels{"app.kubernetes.io/name": "daytwo", "app.kubernetes.io/component": "operator"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			return p.Status.PodIP
		}
	}
	t.Fatal("no running operator pod")
	return ""
}

// Whole checks for every instance ready, every replica streaming.
func Whole(instances int32) func(*v1alpha1.Database) bool {
	return func(d *v1alpha1.Database) bool {
		streaming := 0
		for _, s := range d.Status.InstanceStatuses {
			if s.Role == "replica" && s.Streaming {
				streaming++
			}
		}
		return d.Status.Ready && d.Status.ReadyInstances == instances && streaming == int(instances)-1
	}
}

// PartitionShape is one way to cut the primary off.
type PartitionShape struct {
	Name string
	// Cut says what to drop, given the addresses of the API server, the
	// primary's peers, the operator and the direct client.
	Cut func(api, peers []string, operator, client string) Cut
	// FailsOver: the primary cannot renew its lease, so another instance
	// is promoted.
	FailsOver bool
}

// PartitionShapes are the shapes the e2e suite and bench-failover cut.
var PartitionShapes = []PartitionShape{
	{Name: "isolated but for its client", FailsOver: true, Cut: func(_, _ []string, _, client string) Cut {
		return Cut{Isolate: true, Keep: []string{client}}
	}},
	{Name: "API server only", FailsOver: true, Cut: func(api, _ []string, _, _ string) Cut {
		return Cut{Drop: api}
	}},
	{Name: "operator only", Cut: func(_, _ []string, operator, _ string) Cut {
		return Cut{Drop: []string{operator}}
	}},
}

// PartitionResult is what one shape did.
type PartitionResult struct {
	OldPrimary, NewPrimary string
	// SplitAcks counts the direct client's writes the old primary
	// acknowledged at or after the lease named another instance.
	SplitAcks int
	// Gap is the -rw writer's longest stretch without an acknowledged write.
	Gap time.Duration
}

// PartitionRound cuts the primary of the Database db (of instances) off as
// s says, with the client pod direct writing to its pod IP meanwhile; waits
// for the Database to answer (a failover, or a whole lease term renewed
// through the cut), heals and waits until every instance is whole again. w
// writes through -rw throughout.
func (c *Cluster) PartitionRound(t *testing.T, ns, db string, instances int32, s PartitionShape, w *Writer, direct string) PartitionResult {
	t.Helper()
	cur := c.waitWhole(t, ns, db, instances, "whole before "+s.Name)
	r := PartitionResult{OldPrimary: cur.Status.Primary}
	var peers []string
	for i := range instances {
		if pod := fmt.Sprintf("%s-%d", db, i); pod != r.OldPrimary {
			peers = append(peers, c.PodIP(t, ns, pod))
		}
	}
	primaryIP := c.PodIP(t, ns, r.OldPrimary)
	table := fmt.Sprintf("direct_%d", time.Now().UnixNano()%1e6)
	dw := c.StartWriter(t, ns, direct, "client",
		"host="+primaryIP+" user=app dbname=app connect_timeout=2 sslmode=require", table)
	Eventually(t, time.Minute, s.Name+": the direct client writing", func(context.Context) (bool, error) {
		return len(dw.Read(t).Acked) > 0, nil
	})
	at := time.Now()
	heal := c.Partition(t, ns, r.OldPrimary,
		s.Cut(c.APIServerAddresses(t), peers, c.OperatorPodIP(t), c.PodIP(t, ns, direct)))
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: ns, Name: instanceapi.LeaseName(db)}
	if s.FailsOver {
		Eventually(t, 2*time.Minute, s.Name+": the lease names another instance", func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, key, lease)
			return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != r.OldPrimary && lease.Spec.AcquireTime != nil, nil
		})
		Eventually(t, time.Minute, s.Name+": writes through -rw again", func(context.Context) (bool, error) {
			return w.Read(t).WrittenSince(lease.Spec.AcquireTime.Time), nil
		})
	} else {
		// The barrier: a whole lease term renewed by the primary through the
		// cut, long enough for the operator to have failed over if it would.
		Eventually(t, time.Minute, s.Name+": a lease term renewed through the cut", func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, key, lease)
			return err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(at.Add(2*instanceapi.LeaseDuration)), nil
		})
	}
	r.NewPrimary = ptr.Deref(lease.Spec.HolderIdentity, "")
	heal()
	healed := time.Now()
	c.waitWhole(t, ns, db, instances, s.Name+": whole again after healing")
	// Every write the old primary acknowledged, until it rejoined as a
	// replica (which refuses them).
	acks := dw.Stop(t)
	if r.NewPrimary != r.OldPrimary {
		for _, ackedAt := range acks.Times {
			if !ackedAt.Before(lease.Spec.AcquireTime.Time) {
				r.SplitAcks++
			}
		}
	}
	r.Gap, _ = w.Read(t).GapAround(at, time.Now())
	t.Logf("%s: primary %s -> %s; direct client: %d acknowledged, %d after the lease moved; -rw write gap %s; whole %s after healing",
		s.Name, r.OldPrimary, r.NewPrimary, len(acks.Acked), r.SplitAcks, r.Gap.Round(10*time.Millisecond), time.Since(healed).Round(time.Second))
	return r
}

// waitWhole waits until the Database is Whole and returns it.
func (c *Cluster) waitWhole(t *testing.T, ns, db string, instances int32, what string) *v1alpha1.Database {
	t.Helper()
	d := &v1alpha1.Database{}
	Eventually(t, 5*time.Minute, what, func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, d)
		return err == nil && Whole(instances)(d), nil
	})
	return d
}
