package instance_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A promotion that waited for WAL reads the lease again before it promotes:
// the lease may have moved on meanwhile (another failover decided while
// this replica caught up), and then this replica stays one. The primary
// holds a lease of its own here, so moving the replica's does not fence
// it: the WAL the replica waits for still streams once the link heals.
func TestPromotionRereadsTheLeaseAfterWaitingForWAL(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lt.key.Namespace, Name: "orders-source"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-0")}}
	if err := lt.env.Client.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	// extraFlags[1] is the value of --lease (lt.instance).
	prim, repl, link := lt.linkedPairWith(nil, func(prim, _ *instance) { prim.extraFlags[1] = own.Name })

	link.partition()
	prim.exec(ctx, "INSERT INTO items SELECT g, 'cut off' FROM generate_series(101, 200) g")
	target := prim.query(ctx, "SELECT pg_current_wal_insert_lsn()::text")
	// Named with a handover the replica cannot hold yet, and no new
	// transition: the instance does not promote itself on the lease's word
	// (that path takes the same promote), so the operator's call is the
	// one that waits for target.
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lt.key.Namespace, Name: lt.key.Name}}
	lt.env.Update(t, l, func() {
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To("orders-1"), ptr.To(metav1.NewMicroTime(time.Now()))
		l.Spec.LeaseDurationSeconds = ptr.To(int32(instanceapi.LeaseDuration / time.Second))
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[instanceapi.AnnotationHandoverLSN] = target
	})
	type answer struct {
		code int
		err  error
		body instanceapi.Error
	}
	called := make(chan answer, 1)
	go func() {
		var a answer
		a.code, a.err = tryPost(repl, instanceapi.PathPromote, apiToken, instanceapi.PromoteRequest{WaitLSN: target}, &a.body)
		called <- a
	}()
	// The call is past its first lease read once it polls for target.
	eventually(t, 10*time.Second, func() bool {
		return repl.superuser("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_last_wal_receive_lsn() >= $1%' AND pid <> pg_backend_pid()") != "0"
	}, "the promote call to wait for "+target)
	lt.transfer("orders-2")
	link.heal()

	select {
	case a := <-called:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.code != http.StatusConflict || !strings.Contains(a.body.Message, "moved to another instance while this one waited") {
			t.Fatalf("promote after the lease moved away = %d (%s), want 409 for the lease moving while it waited", a.code, a.body.Message)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("promote did not answer once the link healed")
	}
	if got := repl.query(ctx, "SELECT (pg_last_wal_receive_lsn() >= '"+target+"'::pg_lsn)::text"); got != "true" {
		t.Fatalf("promote answered before the replica held %s", target)
	}
	// Not promoted, then or later.
	for range 3 {
		if got := repl.query(ctx, "SELECT pg_is_in_recovery()::text"); got != "true" {
			t.Fatalf("the replica promoted after the lease moved to orders-2 (pg_is_in_recovery = %s)", got)
		}
		if s := repl.status(); s.Role != instanceapi.RoleReplica {
			t.Fatalf("the replica reports role %s after the lease moved to orders-2", s.Role)
		}
		time.Sleep(time.Second)
	}
}
