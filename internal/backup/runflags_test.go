package backup_test

import (
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/flagtest"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// What the operator renders for a backup Job, the daytwo binary parses
// back to the same values, every flag included.
func TestRunFlagsRoundTrip(t *testing.T) {
	want := backup.RunFlags{
		Storage: instanceapi.StorageFlags{Endpoint: "minio:9000", Bucket: "b", Region: "r", Insecure: true, CAFile: "/ca",
			Path: "/backups", Prefix: "p/", SeriesUID: "u", SeriesName: "ns/n", Database: "d", KeyRequired: true,
			S3Access: instanceapi.S3Access{RoleARN: "arn", WebIdentityTokenFile: "/token", STSEndpoint: "https://sts", SSE: "aws:kms", SSEKMSKeyID: "k"}},
		ID: "20261129T010203Z", LockWaitTimeout: time.Minute, TerminationLog: "/t",
		Retention:   backup.Retention{KeepLast: 1, KeepDaily: 2, KeepWeekly: 3, KeepMonthly: 4},
		Compression: backup.Compression{Algorithm: backup.CompressionGzip, Level: 6},
		Physical:    true, RolesUser: "streaming_replica", SwitchWALHost: "orders-rw",
	}
	flagtest.RoundTrip(t, want, backup.RunFlags.Args, (*backup.RunFlags).Bind)
}
