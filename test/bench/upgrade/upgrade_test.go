//go:build bench

// Package upgrade measures a major upgrade of a real cluster of BENCH_MB
// (default 1024) pgbench data, 15 to 17: daytwo's copy mode (check, then
// pg_upgrade --copy) against a plain copy of the data directory (the floor:
// copy mode cannot beat it), and pg_upgrade --link for comparison (daytwo
// does not offer it: it cannot be undone).
package upgrade

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/upgrade"
)

func TestBenchUpgrade(t *testing.T) {
	mb := 1024
	if v, err := strconv.Atoi(os.Getenv("BENCH_MB")); err == nil && v > 0 {
		mb = v
	}
	ctx := context.Background()
	oldBin, newBin := testpg.BinDirOf(t, "15"), testpg.BinDirOf(t, "17")
	s := testpg.StartWith(t, oldBin)
	s.Exec(t, "postgres", "CREATE DATABASE app")
	// pgbench's scale 1 is about 15 MB on disk.
	scale := max(mb/15, 1)
	start := time.Now()
	s.Pgbench(t, "app", scale)
	sum := s.Query(t, "app", "SELECT sum(abalance) || ':' || count(*) FROM pgbench_accounts")
	t.Logf("pgbench -i -s %d: %s", scale, time.Since(start).Round(time.Second))
	s.Stop()
	size := dirMB(t, s.DataDir())

	// Floor: copying the data directory.
	start = time.Now()
	run(t, "cp", "-a", s.DataDir(), filepath.Join(s.Dir, "floor"))
	floor := time.Since(start)
	_ = os.RemoveAll(filepath.Join(s.Dir, "floor"))

	plan := func(newData, work string) upgrade.Plan {
		if err := os.MkdirAll(work, 0o700); err != nil {
			t.Fatal(err)
		}
		testpg.ChownToRunner(t, work)
		return upgrade.Plan{OldBin: oldBin, NewBin: newBin, OldData: s.DataDir(), NewData: newData, WorkDir: work,
			Mode: upgrade.Copy, Jobs: 2, Port: testpg.FreePort(t),
			InitdbArgs:  []string{"--auth=scram-sha-256", "--pwfile=" + filepath.Join(s.Dir, "pw"), "-E", "UTF8", "--locale=C.UTF-8"},
			Env:         []string{"PGPASSWORD=" + s.Password},
			SysProcAttr: testpg.RunnerCredential(t)}
	}
	p := plan(filepath.Join(s.Dir, "new-copy"), filepath.Join(s.Dir, "w1"))
	start = time.Now()
	if err := upgrade.Check(ctx, p); err != nil {
		t.Fatal(err)
	}
	check := time.Since(start)
	start = time.Now()
	res, err := upgrade.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	copyTotal := time.Since(start)
	n := testpg.StartOnWith(t, newBin, p.NewData)
	if got := n.Query(t, "app", "SELECT sum(abalance) || ':' || count(*) FROM pgbench_accounts"); got != sum {
		t.Fatalf("after the copy-mode upgrade: %s, want %s", got, sum)
	}
	n.Stop()
	_ = os.RemoveAll(p.NewData)

	// Link mode, on a copy (it takes the old directory over).
	linked := filepath.Join(s.Dir, "linked-old")
	run(t, "cp", "-a", s.DataDir(), linked)
	lp := plan(filepath.Join(s.Dir, "new-link"), filepath.Join(s.Dir, "w2"))
	lp.OldData = linked
	initdb := exec.Command(filepath.Join(newBin, "initdb"), "-D", lp.NewData, "--username=postgres", "-E", "UTF8", "--locale=C.UTF-8")
	initdb.SysProcAttr = lp.SysProcAttr
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	start = time.Now()
	link := exec.Command(filepath.Join(newBin, "pg_upgrade"), "--old-bindir", oldBin, "--new-bindir", newBin,
		"--old-datadir", lp.OldData, "--new-datadir", lp.NewData, "--username=postgres", "--socketdir", lp.WorkDir,
		"--jobs", "2", "--old-port", strconv.Itoa(lp.Port), "--new-port", strconv.Itoa(lp.Port), "--link")
	link.Dir, link.Env, link.SysProcAttr = lp.WorkDir, append(os.Environ(), lp.Env...), lp.SysProcAttr
	testpg.ChownToRunner(t, linked)
	if out, err := link.CombinedOutput(); err != nil {
		t.Fatalf("pg_upgrade --link: %v\n%s", err, out)
	}
	linkTook := time.Since(start)

	fmt.Printf("bench-upgrade: PostgreSQL 15 to 17, %d MB of data (pgbench -s %d)\n", size, scale)
	fmt.Printf("  floor: cp -a of the data directory   %6.2fs  %6.1f MB/s\n", floor.Seconds(), float64(size)/floor.Seconds())
	fmt.Printf("  daytwo: pg_upgrade --check            %6.2fs\n", check.Seconds())
	fmt.Printf("  daytwo: copy mode (initdb + upgrade)  %6.2fs  %6.1f MB/s (pg_upgrade alone %.2fs)\n",
		copyTotal.Seconds(), float64(size)/copyTotal.Seconds(), res.Took.Seconds())
	fmt.Printf("  link mode (not offered: no way back)  %6.2fs\n", linkTook.Seconds())
	fmt.Printf("BENCH upgrade_copy_vs_floor %.2f (1.0 = as fast as cp -a; lower is better)\n", copyTotal.Seconds()/floor.Seconds())
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func dirMB(t *testing.T, dir string) int {
	t.Helper()
	out, err := exec.Command("du", "-sm", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	var mb int
	_, _ = fmt.Sscanf(string(out), "%d", &mb)
	return mb
}
