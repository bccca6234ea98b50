package instance_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A replica ahead of the one promoted: it received WAL of the old
// timeline past the new timeline's fork, so it cannot follow the new
// primary. It finds out from the primary's timeline history, stops
// cleanly, rewinds and streams, holding exactly the new primary's rows.
func TestDivergedReplicaIsRewound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lt := newLeaseTest(t, "orders-0")
	a, b, c := lt.instance(0), lt.instance(0), lt.instance(0)
	linkB, linkC := newProxy(t, a.pgPort), newProxy(t, a.pgPort)
	a.extraFlags[len(a.extraFlags)-1] = strconv.Itoa(b.pgPort)
	b.extraFlags[len(b.extraFlags)-1] = strconv.Itoa(linkB.port())
	c.extraFlags[len(c.extraFlags)-1] = strconv.Itoa(linkC.port())
	for _, in := range []*instance{a, b, c} {
		in.writeFile("config/"+instanceapi.ReplicationFile, `{"instances":["orders-0","orders-1","orders-2"]}`)
	}
	startTrio(ctx, a, b, c)
	want := checksum(t, a)
	eventually(t, 30*time.Second, func() bool { return checksum(t, b) == want && checksum(t, c) == want }, "both replicas caught up")

	// b is cut off; c gets writes b never sees. Then a stops and b is promoted.
	linkB.partition()
	a.exec(ctx, "INSERT INTO items SELECT g, 'only a and c' FROM generate_series(101, 120) g")
	want = checksum(t, a)
	eventually(t, 30*time.Second, func() bool { return checksum(t, c) == want }, "c holding what b lacks")
	a.stop()
	lt.transfer("orders-1")
	if code := promote(t, b, apiToken); code != http.StatusOK {
		t.Fatalf("promote = %d, want 200", code)
	}
	b.exec(ctx, "INSERT INTO items SELECT g, 'after' FROM generate_series(121, 130) g")
	start, dir := time.Now(), c.dataDir()
	linkC.retarget(b.pgPort)

	want = checksum(t, b)
	eventually(t, 2*time.Minute, func() bool {
		s := c.status()
		return s.Streaming && s.Phase == instanceapi.PhaseRunning && checksum(t, c) == want
	}, "the diverged replica rewound and streaming from the new primary")
	t.Logf("c follows b again %s after it was pointed at it", time.Since(start).Round(100*time.Millisecond))
	if n := c.query(ctx, "SELECT count(*)::text FROM items WHERE v = 'only a and c'"); n != "0" {
		t.Fatalf("%s rows of the abandoned timeline survived", n)
	}
	if c.dataDir() != dir {
		t.Fatal("the diverged replica was cloned again, not rewound")
	}
}
