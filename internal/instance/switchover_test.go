package instance_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A switchover on real PostgreSQL and a real API server, under a writer
// that records every acknowledged write it sent to the old primary's port:
// the primary shuts down cleanly and hands the lease over with its shutdown
// checkpoint, then forwards new connections to the new primary; the
// replica is promoted once it holds that WAL; every acknowledged write,
// before and after, is on the new primary; and the old primary follows it.
func TestSwitchoverLosesNoAcknowledgedWrite(t *testing.T) {
	// Serial: its deadlines are the lease's, measured on the wall clock (instance_test.go).
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	old, repl := lt.pair()
	old.start("orders-0")
	old.waitReady(90 * time.Second)
	repl.start("orders-1")
	repl.waitReady(90 * time.Second)
	old.exec(ctx, "CREATE TABLE acks (id int PRIMARY KEY)")

	// The writer: one connection per write to the old primary's port, as
	// an application through -rw would, on and on: after the handover the
	// old primary forwards new connections to the new one.
	var mu sync.Mutex
	var acked []int
	var lastAck, promotedAt time.Time
	var gap time.Duration
	afterPromotion := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := old.execWithin(ctx, 500*time.Millisecond, fmt.Sprintf("INSERT INTO acks VALUES (%d)", id)); err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			mu.Lock()
			now := time.Now()
			if !lastAck.IsZero() {
				gap = max(gap, now.Sub(lastAck))
			}
			lastAck = now
			acked = append(acked, id)
			if !promotedAt.IsZero() {
				afterPromotion++
			}
			mu.Unlock()
		}
	}()
	time.Sleep(500 * time.Millisecond)

	if code, _ := demote(t, repl, "orders-0"); code != http.StatusConflict {
		t.Fatalf("demote of a replica = %d, want 409", code)
	}
	start := time.Now()
	code, res := demote(t, old, "orders-1")
	if code != http.StatusOK || res.LSN == "" {
		t.Fatalf("demote = %d %+v", code, res)
	}
	demoted := time.Since(start)
	if l := lt.get(); *l.Spec.HolderIdentity != "orders-1" || l.Annotations[instanceapi.AnnotationHandoverLSN] != res.LSN ||
		l.Annotations[instanceapi.AnnotationSwitchoverRequest] != "2026-11-23T12:00:00Z" {
		t.Fatalf("after the handover the lease is %v %v", *l.Spec.HolderIdentity, l.Annotations)
	}
	if code := promoteAfter(t, repl, res.LSN); code != http.StatusOK {
		t.Fatalf("promote after the handover = %d", code)
	}
	promoted := time.Since(start)
	mu.Lock()
	promotedAt = time.Now()
	mu.Unlock()
	eventually(t, 2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return afterPromotion >= 5
	}, "writes through the old primary's port, forwarded to the new one")
	close(stop)
	<-done
	// Every acknowledged write is on the new primary, those the old one
	// forwarded included.
	got := repl.query(ctx, fmt.Sprintf("SELECT count(*)::text FROM acks WHERE id IN (%s)", joinInts(acked)))
	if got != strconv.Itoa(len(acked)) {
		t.Fatalf("the new primary holds %s of the %d acknowledged writes", got, len(acked))
	}
	repl.exec(ctx, "INSERT INTO acks VALUES (1000000)")
	t.Logf("%d writes acknowledged, %d after the promotion through the old primary's port; demote took %s, demote + promote %s; "+
		"the longest stretch without an acknowledged write %s; shutdown checkpoint %s",
		len(acked), afterPromotion, demoted.Round(time.Millisecond), promoted.Round(time.Millisecond), gap.Round(time.Millisecond), res.LSN)

	// The old primary follows the new one, once its relay stops.
	eventually(t, 2*time.Minute, func() bool {
		s := old.status()
		return s.Role == instanceapi.RoleReplica && s.Phase == instanceapi.PhaseRunning && s.InRecovery && s.Streaming
	}, "the old primary to stream from the new one")
	count := "SELECT count(*)::text FROM acks"
	want := repl.query(ctx, count)
	eventually(t, 30*time.Second, func() bool { return old.query(ctx, count) == want }, "the old primary to follow the new one")
	if l := lt.get(); l.Annotations[instanceapi.AnnotationHandoverLSN] != "" {
		t.Errorf("the new primary's renewals kept the handover LSN: %v", l.Annotations)
	}
}
