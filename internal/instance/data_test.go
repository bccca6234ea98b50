package instance_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// A primary that finds no data (its volume lost) once the Database has
// served must not initdb, restore or import in its place: it would serve
// an empty database as the latest. It refuses, saying why and how out, and
// bootstraps only while the lease records no service.
func TestPrimaryWithoutDataRefusesOnceTheDatabaseServed(t *testing.T) {
	t.Parallel()
	lt := newLeaseTest(t, "orders-0")
	ctx := context.Background()
	l := &coordinationv1.Lease{}
	if err := lt.env.Client.Get(ctx, lt.key, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations = map[string]string{instanceapi.AnnotationLeaseLSN: "0/3000060"}
	if err := lt.env.Client.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	in := lt.instance(testpg.FreePort(t))
	termLog := filepath.Join(in.root, "termination-log")
	in.extraFlags = append(in.extraFlags, "--termination-log", termLog)
	in.start("orders-0")
	if in.exit(60*time.Second, "instead of exiting to be restarted") == nil {
		t.Fatal("the instance exited cleanly")
	}
	if msg, _ := os.ReadFile(termLog); !strings.HasPrefix(string(msg), instanceapi.TerminationDataConflict) ||
		!strings.Contains(string(msg), "has served (its lease records WAL position 0/3000060)") {
		t.Errorf("termination message %q; want the data conflict naming the served position", msg)
	}
	if _, err := os.Stat(filepath.Join(in.root, "data", "PG_VERSION")); err == nil {
		t.Fatal("a data directory was made in place of the served one")
	}

	// A Database that never served (the lease records nothing) bootstraps.
	delete(l.Annotations, instanceapi.AnnotationLeaseLSN)
	if err := lt.env.Client.Get(ctx, lt.key, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations = nil
	if err := lt.env.Client.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	in.stop()
}
