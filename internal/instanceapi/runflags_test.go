package instanceapi_test

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/daytwo-dev/daytwo/internal/flagtest"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// What the operator renders for `instance run`, the daytwo binary parses
// back to the same values, every flag included.
func TestRunFlagsRoundTrip(t *testing.T) {
	want := instanceapi.RunFlags{
		Cluster: "orders", Pod: "orders-0", Namespace: "shop", Lease: "orders-primary", Role: instanceapi.RolePrimary,
		PGData: "/var/lib/postgresql/data/pgdata", RunDir: "/run/x", SecretsDir: "/s", ParametersFile: "/p.conf", BinDir: "/bin/pg",
		HTTPAddress: ":1", MetricsAddress: ":2", Port: 5433, TLS: true,
		PrimaryHost: "orders-rw", PrimaryPort: 5434, Peers: "a=h:1", PeerAPIs: "a=h:2",
		ShutdownTimeout: 20 * time.Second, DatabaseUID: "uid", BootstrapSource: "fromBackup/nightly", ReuseData: true,
		Database: "orders", Owner: "shop", TerminationLog: "/dev/termination-log",
		UpgradeFrom: "/upgrade", UpgradeOnly: true, UpgradeDeadline: time.Minute, BootstrapOnly: true,
		ImportHost: "old", ImportPort: 6432, ImportUser: "me", ImportDatabases: []string{"a", "b"}, ImportRoles: true,
		FromBackup: true, RestoreID: "20261129T010203Z", RestorePhysical: true,
		RecoveryTarget: instanceapi.RecoveryTarget{Time: "2026-11-29T01:02:03Z", LSN: "0/3000000"}, LeaseDuration: 15 * time.Second,
		Restore: instanceapi.StorageFlags{Endpoint: "minio:9000", Bucket: "b", Region: "r", Insecure: true, CAFile: "/ca",
			Path: "/backups", Prefix: "p/", SeriesUID: "u", SeriesName: "ns/n", Database: "d", KeyRequired: true,
			S3Access: instanceapi.S3Access{RoleARN: "arn", WebIdentityTokenFile: "/token", STSEndpoint: "https://sts", SSE: "aws:kms", SSEKMSKeyID: "k"}},
	}
	flagtest.RoundTrip(t, want, instanceapi.RunFlags.Args, (*instanceapi.RunFlags).Bind)
}

// A zero field is left out, so the binary's default applies.
func TestRunFlagsLeaveOutZero(t *testing.T) {
	args := instanceapi.RunFlags{Cluster: "orders"}.Args()
	if len(args) != 1 || args[0] != "--cluster=orders" {
		t.Fatalf("Args() = %q, want only --cluster=orders", args)
	}
	var got instanceapi.RunFlags
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	got.Bind(f)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	if got.Database != "app" || got.ShutdownTimeout != 50*time.Second {
		t.Errorf("defaults not applied: database %q, shutdown timeout %s", got.Database, got.ShutdownTimeout)
	}
}

// What the operator renders for `pooler run`, the daytwo binary parses
// back to the same values, every flag included.
func TestPoolerFlagsRoundTrip(t *testing.T) {
	want := instanceapi.PoolerFlags{Target: "orders-rw.shop.svc", TargetPort: 5433, ListenPort: 6432, PoolMode: "session",
		DefaultPoolSize: 7, MaxClientConn: 99, SecretsDir: "/s", RunDir: "/r", Program: "/usr/sbin/pgbouncer", ServerLoginRetry: time.Second}
	flagtest.RoundTrip(t, want, instanceapi.PoolerFlags.Args, (*instanceapi.PoolerFlags).Bind)
}
