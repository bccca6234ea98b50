package backup_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// What the operator renders for a backup Job, the daytwo binary parses
// back to the same values, every flag included.
func TestRunFlagsRoundTrip(t *testing.T) {
	want := backup.RunFlags{
		Storage: instanceapi.StorageFlags{Endpoint: "minio:9000", Bucket: "b", Region: "r", Insecure: true, CAFile: "/ca",
			Path: "/backups", Prefix: "p/", SeriesUID: "u", SeriesName: "ns/n", Database: "d", KeyRequired: true},
		ID: "20261129T010203Z", LockWaitTimeout: time.Minute, TerminationLog: "/t",
		Retention:   backup.Retention{KeepLast: 1, KeepDaily: 2, KeepWeekly: 3, KeepMonthly: 4},
		Compression: backup.Compression{Algorithm: backup.CompressionGzip, Level: 6},
		Physical:    true, RolesUser: "streaming_replica", SwitchWALHost: "orders-rw",
	}
	var check func(v reflect.Value, path string)
	check = func(v reflect.Value, path string) {
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				check(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		} else if v.IsZero() {
			t.Errorf("%s is zero in the round trip's sample: set it", path)
		}
	}
	check(reflect.ValueOf(want), "RunFlags")
	var got backup.RunFlags
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	got.Bind(f)
	if err := f.Parse(want.Args()); err != nil {
		t.Fatalf("parsing %q: %v", want.Args(), err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q parsed to\n%+v\nwant\n%+v", want.Args(), got, want)
	}
}
