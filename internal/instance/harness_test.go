package instance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	manager "github.com/daytwo-dev/daytwo/internal/instance"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testenv"
)

const apiToken = "token-for-tests"

// leaseTest is a primary lease in a real API server, and instances that
// obey it.
type leaseTest struct {
	t   *testing.T
	env *testenv.Env
	key client.ObjectKey
}

func newLeaseTest(t *testing.T, holder string) *leaseTest {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ns := env.Namespace(t)
	lt := &leaseTest{t: t, env: env, key: client.ObjectKey{Namespace: ns, Name: instanceapi.LeaseName("orders")}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lt.key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	if err := env.Client.Create(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return lt
}

// instance makes an instance that takes its role from the lease and
// streams from primaryPort when it is a replica.
func (lt *leaseTest) instance(primaryPort int) *instance {
	// No peer addresses: a replica streams from --primary-host, which each
	// test points (through a proxy it can cut, say) where it wants.
	in := newInstance(lt.t, "--lease", lt.key.Name, "--namespace", lt.key.Namespace, "--peers=",
		"--primary-host", "127.0.0.1", "--primary-port", strconv.Itoa(primaryPort))
	in.writeFile("secrets/api-token", apiToken)
	lt.env.WriteKubeconfig(lt.t, filepath.Join(in.root, "kubeconfig"))
	in.env = append(in.env, "KUBECONFIG="+filepath.Join(in.root, "kubeconfig"))
	return in
}

// pair makes two instances that each stream from the other when a replica.
func (lt *leaseTest) pair() (*instance, *instance) {
	a, b := lt.instance(0), lt.instance(0)
	a.extraFlags[len(a.extraFlags)-1] = strconv.Itoa(b.pgPort)
	b.extraFlags[len(b.extraFlags)-1] = strconv.Itoa(a.pgPort)
	return a, b
}

func (lt *leaseTest) get() *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if err := lt.env.Client.Get(context.Background(), lt.key, l); err != nil {
		lt.t.Fatal(err)
	}
	return l
}

// transfer is what the operator does at failover: name another holder.
func (lt *leaseTest) transfer(to string) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lt.key.Namespace, Name: lt.key.Name}}
	lt.env.Update(lt.t, l, func() {
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(to), ptr.To(metav1.NewMicroTime(time.Now()))
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	})
}

func promote(t *testing.T, in *instance, token string) int {
	return post(t, in, instanceapi.PathPromote, token, nil, nil)
}

// post calls an authenticated path of in's API with body as JSON (nil:
// none) and decodes the answer into out (nil: ignored).
func post(t *testing.T, in *instance, path, token string, body, out any) int {
	t.Helper()
	code, err := tryPost(in, path, token, body, out)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// tryPost is post for a goroutine other than the test's: it returns the
// error a test would fail on.
func tryPost(in *instance, path, token string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(http.MethodPost, in.url(path), r)
	if token != "" {
		req.Header.Set(instanceapi.AuthorizationHeader, "Bearer "+token)
	}
	resp, err := in.client().Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, nil
}

// dataDir identifies the data directory in place now: a clone swaps in a
// new one, a rewind keeps it.
func (in *instance) dataDir() uint64 {
	in.t.Helper()
	fi, err := os.Stat(filepath.Join(in.root, "data"))
	if err != nil {
		in.t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// staysReady returns a check, to call often, that fails the test once the
// instance has not been ready for over a second: a kubelet probing every
// second, twice, could see that and take it out of its Services.
func (in *instance) staysReady(during string) func() {
	var unready time.Time
	return func() {
		switch {
		case in.readyz():
			unready = time.Time{}
		case unready.IsZero():
			unready = time.Now()
		case time.Since(unready) > time.Second:
			in.t.Fatalf("%s: not ready for over a second", during)
		}
	}
}

// smallWALKeep makes a primary keep little WAL for slots: 32 MB.
var smallWALKeep = map[string]string{"max_slot_wal_keep_size": "32MB", "wal_keep_size": "0", "min_wal_size": "32MB", "max_wal_size": "64MB"}

// slotStatus reads the state of orders-1's slot: "<wal_status>:<active>".
const slotStatus = "SELECT coalesce(string_agg(wal_status || ':' || active, ','), 'none') FROM pg_replication_slots WHERE slot_name = 'daytwo_orders_1'"

// linkedPair starts orders-0 as the primary and orders-1 as its replica,
// which reaches it through a proxy the test can cut; each streams from the
// other when a replica, and both keep little WAL for slots (smallWALKeep).
// It returns once the replica streams through its slot, with 100 rows in
// items.
func (lt *leaseTest) linkedPair() (prim, repl *instance, link *proxy) {
	return lt.linkedPairWith(nil)
}

// withSettings is base with more settings.
func withSettings(base, more map[string]string) map[string]string {
	all := maps.Clone(base)
	maps.Copy(all, more)
	return all
}

// linkedPairWith is linkedPair with settings besides smallWALKeep, and
// setup run on both before they start.
func (lt *leaseTest) linkedPairWith(settings map[string]string, setup ...func(prim, repl *instance)) (prim, repl *instance, link *proxy) {
	ctx := context.Background()
	prim, repl = lt.instance(0), lt.instance(0)
	link = newProxy(lt.t, prim.pgPort)
	prim.extraFlags[len(prim.extraFlags)-1] = strconv.Itoa(repl.pgPort)
	repl.extraFlags[len(repl.extraFlags)-1] = strconv.Itoa(link.port())
	for _, in := range []*instance{prim, repl} {
		in.writeFile("config/"+instanceapi.ReplicationFile, `{"instances":["orders-0","orders-1"]}`)
		in.setParameters(withSettings(smallWALKeep, settings))
	}
	for _, f := range setup {
		f(prim, repl)
	}
	prim.start("orders-0")
	prim.waitReady(90 * time.Second)
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	prim.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text)")
	prim.exec(ctx, "INSERT INTO items SELECT g, 'before' FROM generate_series(1, 100) g")
	eventually(lt.t, 30*time.Second, func() bool { return prim.query(ctx, slotStatus) == "reserved:true" },
		"the replica streaming through its slot")
	return prim, repl, link
}

// restartWith restarts in through the API and waits until it runs with
// setting at value.
func restartWith(t *testing.T, in *instance, setting, value string) {
	t.Helper()
	eventually(t, 30*time.Second, func() bool {
		return slices.Contains(in.status().PendingRestartSettings, setting)
	}, setting+" pending a restart")
	// The operator restarts in place while the file loaded is not the one
	// postgres started with, and moves the pod once they agree.
	if s := in.status(); s.StartConfigHash == "" || s.StartConfigHash == s.ConfigHash {
		t.Fatalf("pending a restart: started with %q, loaded %q", s.StartConfigHash, s.ConfigHash)
	}
	if code := post(t, in, instanceapi.PathRestart, apiToken, nil, nil); code != http.StatusAccepted {
		t.Fatalf("restart = %d, want 202", code)
	}
	// Started with the file it loaded: the restart happened (the status
	// may still say Running a moment after the 202, and a replica at its
	// primary's value ran it before too).
	eventually(t, time.Minute, func() bool {
		s := in.status()
		return s.Phase == instanceapi.PhaseRunning && s.StandbySettings[setting] == value && s.StartConfigHash == s.ConfigHash
	}, fmt.Sprintf("restarted with the new file, running %s = %s", setting, value))
}

// joinInts renders ids for SQL's IN (...).
func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

// startTrio starts a as the primary (orders-0), then b and c as its
// replicas, and writes 100 rows to table items.
func startTrio(ctx context.Context, a, b, c *instance) {
	a.start("orders-0")
	a.waitReady(90 * time.Second)
	b.start("orders-1")
	c.start("orders-2")
	b.waitReady(90 * time.Second)
	c.waitReady(90 * time.Second)
	a.exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text)")
	a.exec(ctx, "INSERT INTO items SELECT g, 'before' FROM generate_series(1, 100) g")
	// The replicas replay the table a moment later; a test's first
	// checksum of one must not find it missing.
	for _, r := range []*instance{b, c} {
		eventually(a.t, 30*time.Second, func() bool {
			_, err := r.tryQuery(ctx, "SELECT count(*)::text FROM items")
			return err == nil
		}, "the replicas holding the table")
	}
}

func demote(t *testing.T, in *instance, to string) (int, instanceapi.DemoteResult) {
	var res instanceapi.DemoteResult
	code := post(t, in, instanceapi.PathDemote, apiToken, instanceapi.DemoteRequest{To: to, Request: "2026-11-23T12:00:00Z"}, &res)
	return code, res
}

func promoteAfter(t *testing.T, in *instance, waitLSN string) int {
	return post(t, in, instanceapi.PathPromote, apiToken, instanceapi.PromoteRequest{WaitLSN: waitLSN}, nil)
}

// exec runs sql as the application owner.
// execWithin runs sql as the application owner on a new connection, all
// within d, as a client with a deadline would.
func (in *instance) execWithin(ctx context.Context, d time.Duration, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	_, err = c.Exec(ctx, sql)
	return err
}

func (in *instance) exec(ctx context.Context, sql string) {
	in.t.Helper()
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		in.t.Fatalf("connect: %v", err)
	}
	defer func() { _ = c.Close(ctx) }()
	if _, err := c.Exec(ctx, sql); err != nil {
		in.t.Fatalf("%s: %v", sql, err)
	}
}

// kill SIGKILLs the instance manager and everything it started, as a node
// loss or the OOM killer would: no cleanup runs. It returns once they are
// gone (reaped), as they would be with their container.
func (in *instance) kill() {
	in.t.Helper()
	pids := descendants(in.cmd.Process.Pid, "")
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = in.cmd.Process.Kill()
	<-in.exited
	eventually(in.t, 30*time.Second, func() bool {
		return !slices.ContainsFunc(pids, func(pid int) bool {
			_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
			return err == nil
		})
	}, "the killed processes gone")
}

// procs reads every process of the host.
func procs() map[int]proc {
	out := map[int]proc{}
	for pid, p := range manager.Processes() {
		out[pid] = proc{ppid: p.PPID, comm: p.Comm, state: p.State}
	}
	return out
}

// proc is what the tests need of a process.
type proc struct {
	ppid        int
	comm, state string
}

// descendants lists the processes below pid, named name when name is set.
func descendants(pid int, name string) []int {
	all := procs()
	var out []int
	for p := range all {
		for a := all[p].ppid; a > 1; a = all[a].ppid {
			if a == pid {
				if name == "" || all[p].comm == name {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

// checksum is a digest of the items table and its row count.
func checksum(t *testing.T, in *instance) string {
	t.Helper()
	return in.query(context.Background(), "SELECT count(*) || ':' || md5(string_agg(id || '=' || v, ',' ORDER BY id)) FROM items")
}
