//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/test/e2e/framework"
)

// upgradeChecksum digests every row of pgbench's tables and of kept.
const upgradeChecksum = `SELECT md5(
	(SELECT string_agg(a::text, ',' ORDER BY aid) FROM pgbench_accounts a) ||
	(SELECT string_agg(b::text, ',' ORDER BY bid) FROM pgbench_branches b) ||
	(SELECT string_agg(k::text, ',' ORDER BY id) FROM kept k))`

// upgradeEnded: the last major upgrade reached phase, and both instances
// are ready on image (a failed upgrade leaves the phase Degraded: the
// instances do not run the version spec asks for).
func upgradeEnded(phase v1alpha1.MajorUpgradePhase, image string) func(*v1alpha1.Database) bool {
	return func(d *v1alpha1.Database) bool {
		return d.Status.Upgrade != nil && d.Status.Upgrade.Phase == phase && d.Status.ReadyInstances == 2 &&
			d.Status.CurrentImage == image && d.Status.ObservedGeneration == d.Generation
	}
}

// A 2-instance Database on 15 with pgbench data: an upgrade to 17 that
// pg_upgrade --check refuses comes back on 15 with the data as it was; the
// retry after the fix upgrades, and both instances run 17 with the same
// data; then 17 to 18.
func TestDatabaseMajorUpgrade(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := restrictedNamespace(t)
	cluster.ReserveCPU(t, ns, 250)
	createDatabase(t, ns, "legacy", func(db *v1alpha1.Database) {
		db.Spec.Version = "15"
		db.Spec.Instances = ptr.To[int32](2)
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
	})
	waitDatabase(t, ns, "legacy", 4*time.Minute, "Ready with 2 instances on 15", isReady(2, postgres.DefaultImage("15")))
	psqlPod(t, ns, "psql", "legacy")
	rw, ro := "legacy-rw."+ns+".svc.cluster.local", "legacy-ro."+ns+".svc.cluster.local"
	cluster.ExecOK(t, ns, "psql", "client", "pgbench", "-i", "-q", "-s", "2", "-h", rw, "-U", "app", "app")
	sql(t, ns, "psql", "legacy-rw", "CREATE TABLE kept (id int PRIMARY KEY, note text, at timestamptz); "+
		"INSERT INTO kept SELECT g, md5(g::text), now() FROM generate_series(1, 5000) g; "+
		// pg_upgrade cannot carry a regproc column: the check refuses.
		"CREATE TABLE blocker (f regproc); INSERT INTO blocker VALUES ('now')")
	want := sql(t, ns, "psql", "legacy-rw", upgradeChecksum)
	versions := func() (string, string) {
		return sql(t, ns, "psql", "legacy-rw", "SHOW server_version"), sql(t, ns, "psql", "legacy-ro", "SHOW server_version")
	}
	sameData := func(when string) {
		t.Helper()
		if got := sql(t, ns, "psql", "legacy-rw", upgradeChecksum); got != want {
			t.Fatalf("checksum %s %s, want %s", got, when, want)
		}
		if got := strings.TrimSpace(cluster.PSQL(t, ns, "psql", "client", ro, "app", "app", upgradeChecksum)); got != want {
			t.Fatalf("replica checksum %s %s, want %s", got, when, want)
		}
	}

	// 1. The check refuses: the instances come back on 15.
	start := time.Now()
	updateDatabase(t, ns, "legacy", func(d *v1alpha1.Database) { d.Spec.Version = "17" })
	db := waitDatabase(t, ns, "legacy", 6*time.Minute, "back on 15 after the refused upgrade", upgradeEnded(v1alpha1.MajorUpgradeFailed, postgres.DefaultImage("15")))
	u := db.Status.Upgrade
	t.Logf("refused upgrade: back on 15 in %s, writes unavailable %ds: %s", time.Since(start).Round(time.Second), u.WritesUnavailableSeconds, u.Message)
	if !strings.Contains(u.Message, "reg*") || !strings.Contains(u.Message, "blocker") {
		t.Fatalf("the failed upgrade does not say why: %q", u.Message)
	}
	if !hasCondition(v1alpha1.ConditionUpgradeFailed, "True", v1alpha1.ReasonMajorUpgradeFailed)(db) {
		t.Fatalf("conditions after the failed upgrade: %+v", db.Status.Conditions)
	}
	if len(eventsFor(t, ns, "legacy", v1alpha1.ReasonMajorUpgradeFailed)) == 0 {
		t.Error("no MajorUpgradeFailed event")
	}
	sameData("after the refused upgrade")
	if p, r := versions(); !strings.HasPrefix(p, "15.") || !strings.HasPrefix(r, "15.") {
		t.Fatalf("server_version after the refused upgrade: primary %s, replica %s", p, r)
	}

	// 2. Fixed, and tried again: both instances on 17.
	sql(t, ns, "psql", "legacy-rw", "DROP TABLE blocker")
	start = time.Now()
	updateDatabase(t, ns, "legacy", func(d *v1alpha1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[v1alpha1.AnnotationRetryUpgrade] = "after dropping blocker"
	})
	db = waitDatabase(t, ns, "legacy", 8*time.Minute, "upgraded to 17", upgradeEnded(v1alpha1.MajorUpgradeSucceeded, postgres.DefaultImage("17")))
	t.Logf("15 to 17: ready in %s, writes unavailable %ds: %s", time.Since(start).Round(time.Second),
		db.Status.Upgrade.WritesUnavailableSeconds, db.Status.Upgrade.Message)
	if c := db.Status.CurrentVersion; c != "17" {
		t.Fatalf("status.currentVersion %s after the upgrade", c)
	}
	sameData("after the upgrade to 17")
	if p, r := versions(); !strings.HasPrefix(p, "17.") || !strings.HasPrefix(r, "17.") {
		t.Fatalf("server_version after the upgrade: primary %s, replica %s", p, r)
	}
	if got := sql(t, ns, "psql", "legacy-rw", "SELECT count(*) FROM pg_stats WHERE tablename = 'pgbench_accounts'"); got == "0" {
		t.Error("no statistics on pgbench_accounts after the upgrade: ANALYZE did not run")
	}

	// 3. 17 to 18. Debian trixie's 17.12 writes a pg_attver column option
	// on the tables it creates, which sid's 18.6 rejects (internal/upgrade's
	// test shows it): these tables were created on 15 and carry none, so
	// the upgrade succeeds here. Should it fail, it must be for that, with
	// 17 running the data as it was.
	start = time.Now()
	updateDatabase(t, ns, "legacy", func(d *v1alpha1.Database) { d.Spec.Version = "18" })
	db = waitDatabase(t, ns, "legacy", 8*time.Minute, "upgraded to 18, or back on 17", func(d *v1alpha1.Database) bool {
		return d.Status.Upgrade != nil && d.Status.Upgrade.To == "18" &&
			(upgradeEnded(v1alpha1.MajorUpgradeSucceeded, postgres.DefaultImage("18"))(d) || upgradeEnded(v1alpha1.MajorUpgradeFailed, postgres.DefaultImage("17"))(d))
	})
	u = db.Status.Upgrade
	t.Logf("17 to 18: %s in %s, writes unavailable %ds: %s", u.Phase, time.Since(start).Round(time.Second), u.WritesUnavailableSeconds, u.Message)
	major := "18."
	if u.Phase == v1alpha1.MajorUpgradeFailed {
		if !strings.Contains(u.Message, "pg_attver") {
			t.Fatalf("17 to 18 failed for another reason than the packages' pg_attver: %s", u.Message)
		}
		major = "17."
	}
	sameData("after 17 to 18")
	if p, r := versions(); !strings.HasPrefix(p, major) || !strings.HasPrefix(r, major) {
		t.Fatalf("server_version after 17 to 18: primary %s, replica %s, want %s", p, r, major)
	}
}

// A PostgreSQL 15 that daytwo does not manage (started by hand in a pod)
// is imported into a Database on 17: its role logs in with its old
// password through the Database's -rw Service and reads the same data.
func TestDatabaseImportsAPlainPostgreSQL(t *testing.T) {
	t.Parallel()
	requireRealNode(t)
	ns := restrictedNamespace(t)
	cluster.ReserveCPU(t, ns, 150)
	secret(t, ns, "old", map[string]string{"password": "old-" + ns})
	plainPostgres(t, ns, "old", "docker.io/library/postgres:15", "postgres")
	client := framework.ClientPod(ns, "psql", postgresImage, fromSecret("PGPASSWORD", "old", "password"))
	client.Spec.SecurityContext = pgSecurity
	cluster.RunPod(t, client)
	old := "old." + ns + ".svc.cluster.local"
	cluster.PSQL(t, ns, "psql", "client", old, "postgres", "postgres", "CREATE ROLE legacy LOGIN PASSWORD 'legacy-pass'")
	cluster.PSQL(t, ns, "psql", "client", old, "postgres", "postgres", "CREATE DATABASE shop OWNER legacy")
	cluster.ExecOK(t, ns, "psql", "client", "env", "PGPASSWORD=legacy-pass", "pgbench", "-i", "-q", "-s", "2", "-h", old, "-U", "legacy", "shop")
	const sum = "SELECT sum(abalance) || ':' || count(*) || ':' || md5(string_agg(aid::text || bid::text, ',' ORDER BY aid)) FROM pgbench_accounts"
	asLegacy := func(host string) string {
		return strings.TrimSpace(cluster.ExecOK(t, ns, "psql", "client", "env", "PGPASSWORD=legacy-pass",
			"psql", "-h", host, "-U", "legacy", "-d", "shop", "-v", "ON_ERROR_STOP=1", "-qtAc", sum))
	}
	want := asLegacy(old)

	secret(t, ns, "old-credentials", map[string]string{"username": "postgres", "password": "old-" + ns})
	start := time.Now()
	createDatabase(t, ns, "imported", func(db *v1alpha1.Database) {
		db.Spec.Version = "17"
		db.Spec.DeletionPolicy = v1alpha1.DatabaseDeletionDelete
		db.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{Import: &v1alpha1.BootstrapImport{
			Host: old, Databases: []string{"shop"}, CredentialsSecret: v1alpha1.LocalObjectReference{Name: "old-credentials"}}}
	})
	waitDatabase(t, ns, "imported", 4*time.Minute, "Ready after the import", isReady(1, postgres.DefaultImage("17")))
	t.Logf("15 imported into 17 and Ready in %s", time.Since(start).Round(time.Second))
	rw := "imported-rw." + ns + ".svc.cluster.local"
	framework.Eventually(t, time.Minute, "imported-rw answering", func(ctx context.Context) (bool, error) {
		_, _, err := cluster.Exec(ctx, ns, "psql", "client", "pg_isready", "-q", "-h", rw, "-t", "2")
		return err == nil, nil
	})
	if got := asLegacy(rw); got != want {
		t.Fatalf("imported data %s, want %s", got, want)
	}
	if v := strings.TrimSpace(cluster.ExecOK(t, ns, "psql", "client", "env", "PGPASSWORD=legacy-pass",
		"psql", "-h", rw, "-U", "legacy", "-d", "shop", "-qtAc", "SHOW server_version")); !strings.HasPrefix(v, "17.") {
		t.Fatalf("server_version %s", v)
	}
}
