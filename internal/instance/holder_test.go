package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// Replicas stream from the instance the lease names, at its own address:
// when a failover moves the lease, the other replica streams from the new
// primary within seconds, through a slot the new primary made before its
// promotion, though nothing points it there (its --primary-host still
// names the old primary, which is gone). With required durability the new
// primary's commits wait for it, so that is when writes come back. The
// deleted primary relays new connections to the new one meanwhile.
func TestReplicasFollowTheLeaseHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	a, b, c := lt.instance(0), lt.instance(0), lt.instance(0)
	peers := fmt.Sprintf("--peers=orders-0=127.0.0.1:%d,orders-1=127.0.0.1:%d,orders-2=127.0.0.1:%d", a.pgPort, b.pgPort, c.pgPort)
	r, _ := json.Marshal(instanceapi.Replication{Instances: []string{"orders-0", "orders-1", "orders-2"}, Synchronous: 1, Required: true})
	for _, in := range []*instance{a, b, c} {
		in.extraFlags[slices.Index(in.extraFlags, "--peers=")] = peers
		in.extraFlags[len(in.extraFlags)-1] = strconv.Itoa(a.pgPort)
		in.writeFile("config/"+instanceapi.ReplicationFile, string(r))
	}
	startTrio(ctx, a, b, c)

	// The failover: a's pod is deleted (SIGTERM), so a stops cleanly,
	// releases the lease and relays; the lease moves to b, b is promoted.
	deleted := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool { return lt.get().Spec.RenewTime == nil }, "a to release the lease")
	// Ready from the release on, before the lease names anyone: had it
	// turned not ready while the operator decides, -rw would lose its
	// route until the kubelet's next probe after the move.
	if !a.readyz() {
		t.Error("the deleted primary is not ready between its release and the lease's move")
	}
	// The release records a's last WAL, and b, asked for positions read
	// now, already holds it all: failover can weigh it at once.
	releasedAt := lt.get().Annotations[instanceapi.AnnotationLeaseLSN]
	fresh := b.freshStatus()
	if want, ok := postgres.ParseLSN(releasedAt); !ok || !fresh.PositionsReadNow || !lsnAtLeast(fresh.ReceivedLSN, want) {
		t.Errorf("after a's release at %q, b's status with positions read now: %+v", releasedAt, fresh)
	}
	lt.transfer("orders-1")
	start := time.Now()
	if code := promote(t, b, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	promoted := time.Since(start)
	// Each attempt writes a new row: one that timed out waiting for c is
	// committed locally all the same.
	id := 100
	write := func(via *instance) error {
		id++
		return via.execWithin(ctx, 500*time.Millisecond, fmt.Sprintf("INSERT INTO items VALUES (%d, 'after')", id))
	}
	// Through the deleted primary's port, as -rw routes while the deleted
	// pod is its only serving endpoint: a relays to b, and stays ready.
	eventually(t, 2*time.Second, func() bool { return write(a) == nil }, "a commit through the deleted primary, relayed to b, acknowledged by c")
	t.Logf("promoted in %s; the first synchronous commit on the new primary, through the deleted one, %s after the promotion began",
		promoted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if !a.readyz() {
		t.Error("the deleted primary is not ready while it relays: kube-proxy would stop routing to it")
	}
	if got := b.query(ctx, fmt.Sprintf("SELECT count(*)::text FROM items WHERE id = %d", id)); got != "1" {
		t.Fatal("the relayed write is not on the new primary")
	}
	if err := write(b); err != nil {
		t.Fatalf("a commit on the new primary: %v", err)
	}
	select {
	case <-a.exited:
		t.Logf("the deleted primary exited %s after SIGTERM", time.Since(deleted).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted primary did not exit within 30 s")
	}
	// What the release recorded is a's shutdown checkpoint.
	out, err := exec.Command(filepath.Join(testpg.BinDir(t), "pg_controldata"), filepath.Join(a.root, "data")).Output()
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := ""
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "Latest checkpoint location" {
			checkpoint = strings.TrimSpace(v)
		}
	}
	if checkpoint == "" || checkpoint != releasedAt {
		t.Errorf("the release recorded %s; a's shutdown checkpoint is %q", releasedAt, checkpoint)
	}
	if got := b.superuser("SELECT string_agg(application_name || ':' || state || ':' || sync_state, ',') FROM pg_stat_replication"); got != "orders-2:streaming:quorum" {
		t.Fatalf("the new primary's standbys: %s", got)
	}
	if got := b.superuser("SELECT count(*) FROM pg_replication_slots WHERE active AND slot_name = 'daytwo_orders_2'"); got != "1" {
		t.Fatal("c does not stream through its slot on the new primary")
	}
	if got := c.query(ctx, fmt.Sprintf("SELECT count(*)::text FROM items WHERE id = %d", id)); got != "1" {
		t.Fatal("c lacks the acknowledged row")
	}
}
