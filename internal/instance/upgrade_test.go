package instance_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
)

// upgradeSetup is a primary on PostgreSQL 15 with rows in items, stopped,
// and the bundle of 15's programs the old image's init container would
// write. It returns the data's checksum and the bundle's directory.
func upgradeSetup(t *testing.T, params map[string]string, beforeStop func(*instance), flags ...string) (*instance, string, string) {
	t.Helper()
	ctx := context.Background()
	in := newInstance(t, append([]string{"--bin-dir", testpg.BinDirOf(t, "15")}, flags...)...)
	if slices.Contains(flags, "--"+instanceapi.FlagTLS) {
		newTestCA(t).issue(in)
	}
	in.setParameters(params)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	c, err := in.connect(ctx, "shop", appPassword, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, v text); "+
		"INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
	sum := checksum(t, in)
	if beforeStop != nil {
		beforeStop(in)
	}
	in.stop()
	bundle := filepath.Join(in.root, "upgrade")
	if _, err := upgrade.Bundle("/", "15", bundle); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, in.root)
	return in, sum, bundle
}

func TestMajorUpgradeInPlace(t *testing.T) {
	t.Parallel()
	// A replica of the 15 primary, stopped with it.
	var rep *instance
	in, before, bundle := upgradeSetup(t, map[string]string{}, func(in *instance) {
		rep = newInstance(t, "--role", "replica", "--primary-host", "127.0.0.1", "--primary-port", strconv.Itoa(in.pgPort),
			"--bin-dir", testpg.BinDirOf(t, "15"))
		rep.start("orders-1")
		rep.waitReady(90 * time.Second)
		eventually(t, 15*time.Second, func() bool { return checksum(t, rep) == checksum(t, in) }, "the 15 replica caught up")
		rep.stop()
	})
	data := filepath.Join(in.root, "data")
	in.extraFlags = []string{"--bin-dir", testpg.BinDirOf(t, "17"), "--" + instanceapi.FlagUpgradeFrom, bundle}
	start := time.Now()
	in.start("orders-0")
	in.waitReady(180 * time.Second)
	t.Logf("15 to 17 in place: ready after %s", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	if v := in.show(ctx, "server_version"); !strings.HasPrefix(v, "17.") {
		t.Fatalf("server_version %s after the upgrade", v)
	}
	if after := checksum(t, in); after != before {
		t.Fatalf("checksum %s after the upgrade, %s before", after, before)
	}
	// Once it serves, the old data goes and the statistics come back.
	eventually(t, 60*time.Second, func() bool {
		_, err := os.Stat(data + ".15")
		return os.IsNotExist(err)
	}, "the pre-upgrade data removed once the new server serves")
	eventually(t, 60*time.Second, func() bool {
		return in.query(ctx, "SELECT count(*)::text FROM pg_stats WHERE tablename = 'items'") != "0"
	}, "items analyzed after the upgrade")
	// The replica, on the new image, finds 15 data and clones the upgraded primary.
	rep.extraFlags = append(rep.extraFlags, "--bin-dir", testpg.BinDirOf(t, "17"))
	rep.start("orders-1")
	rep.waitReady(90 * time.Second)
	if s := rep.status(); s.Role != instanceapi.RoleReplica || !s.Streaming {
		t.Fatalf("replica after the upgrade: %+v", s)
	}
	if after := checksum(t, rep); after != before {
		t.Fatalf("replica checksum %s after the upgrade, %s before", after, before)
	}
	if v := rep.show(ctx, "server_version"); !strings.HasPrefix(v, "17.") {
		t.Fatalf("replica server_version %s after the upgrade", v)
	}
	rep.stop()
	in.stop()
	// A restart is a plain start: nothing to upgrade any more.
	in.start("orders-0")
	in.waitReady(60 * time.Second)
	if after := checksum(t, in); after != before {
		t.Fatalf("checksum %s after a restart, %s before", after, before)
	}
	in.stop()
}

// A setting 15 takes and 17 refuses (vacuum_defer_cleanup_age went in 16):
// pg_upgrade succeeds, the new server cannot start, and the old data comes
// back as it was.
func TestMajorUpgradeRollsBackWhenTheNewServerCannotStart(t *testing.T) {
	t.Parallel()
	params := map[string]string{"vacuum_defer_cleanup_age": "0"}
	in, before, bundle := upgradeSetup(t, params, nil)
	data := filepath.Join(in.root, "data")
	in.extraFlags = []string{"--bin-dir", testpg.BinDirOf(t, "17"), "--" + instanceapi.FlagUpgradeFrom, bundle}
	in.start("orders-0")
	// The manager stays up, Failed, so the operator reads why and returns
	// the pod to the old image (a restart would only try again).
	var msg string
	eventually(t, 180*time.Second, func() bool {
		s, ok := in.tryStatus()
		msg = s.Message
		return ok && s.Phase == instanceapi.PhaseFailed
	}, "phase Failed after an upgrade that cannot start")
	if !strings.HasPrefix(msg, instanceapi.TerminationUpgradeFailed) || !strings.Contains(msg, "vacuum_defer_cleanup_age") {
		t.Fatalf("status message %q does not say the upgrade failed and why", msg)
	}
	t.Logf("status message: %s", msg)
	if in.readyz() {
		t.Fatal("/readyz answers OK after a failed upgrade")
	}
	in.stop()
	if v, _ := os.ReadFile(filepath.Join(data, "PG_VERSION")); strings.TrimSpace(string(v)) != "15" {
		t.Fatalf("PG_VERSION %q after the rollback, want 15", v)
	}
	for _, left := range []string{".15", ".upgrading", ".failed"} {
		if _, err := os.Stat(data + left); !os.IsNotExist(err) {
			t.Fatalf("the rollback left %s behind (%v)", data+left, err)
		}
	}
	// The old image runs the data as it was.
	in.extraFlags = []string{"--bin-dir", testpg.BinDirOf(t, "15")}
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	if after := checksum(t, in); after != before {
		t.Fatalf("checksum %s after the rollback, %s before", after, before)
	}
	in.stop()
}

// The upgrade Job's command (--upgrade-only) upgrades and exits; should
// the pod then come back on the old image before the new server ever
// served (the Job was killed after its swap, and the operator rolled
// back), the old data is put back, not refused as newer. Both serve TLS,
// as the operator's pods do: every server pg_upgrade starts reads the
// certificate the configuration names.
func TestUpgradeOnlyAndAnUnservedUpgradeGoesBack(t *testing.T) {
	t.Parallel()
	tlsFlag := "--" + instanceapi.FlagTLS
	in, before, bundle := upgradeSetup(t, map[string]string{}, nil, tlsFlag)
	data := filepath.Join(in.root, "data")
	in.extraFlags = []string{tlsFlag, "--bin-dir", testpg.BinDirOf(t, "17"), "--" + instanceapi.FlagUpgradeFrom, bundle, "--" + instanceapi.FlagUpgradeOnly}
	// The Job's pod starts with an empty run directory.
	if err := os.RemoveAll(filepath.Join(in.root, "run")); err != nil {
		t.Fatal(err)
	}
	in.runToExit("orders-0", "--upgrade-only")
	if v, _ := os.ReadFile(filepath.Join(data, "PG_VERSION")); strings.TrimSpace(string(v)) != "17" {
		t.Fatalf("PG_VERSION %q after --upgrade-only", v)
	}
	if _, err := os.Stat(data + ".15"); err != nil {
		t.Fatalf("the pre-upgrade data is not kept: %v", err)
	}
	in.extraFlags = []string{tlsFlag, "--bin-dir", testpg.BinDirOf(t, "15")}
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	if after := checksum(t, in); after != before {
		t.Fatalf("checksum %s back on 15, %s before", after, before)
	}
	if v := in.show(context.Background(), "server_version"); !strings.HasPrefix(v, "15.") {
		t.Fatalf("server_version %s, want 15", v)
	}
	in.stop()
}
