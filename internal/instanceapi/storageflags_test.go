package instanceapi_test

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// What the operator renders, the daytwo binary parses back to the same
// values, with and without a prefix, for S3 and for a volume.
func TestStorageFlagsRoundTrip(t *testing.T) {
	for _, want := range []instanceapi.StorageFlags{
		{Endpoint: "minio.ns.svc:9000", Bucket: "b", Region: "eu-west-1", Insecure: true, CAFile: "/etc/daytwo/s3-ca/ca.crt",
			Prefix: "ns/nightly/", SeriesUID: "1234-abcd", SeriesName: "ns/nightly", Database: "orders", KeyRequired: true},
		{Path: "/backups/sub", Prefix: "p/", SeriesUID: "u", SeriesName: "ns/n", Database: "d"},
		{},
	} {
		for _, prefix := range []string{"", "restore-"} {
			var got instanceapi.StorageFlags
			f := pflag.NewFlagSet("t", pflag.ContinueOnError)
			got.Bind(f, prefix)
			if err := f.Parse(want.Args(prefix)); err != nil {
				t.Fatalf("%q: parsing %q: %v", prefix, want.Args(prefix), err)
			}
			if got != want {
				t.Errorf("%q: %q parsed to %+v, want %+v", prefix, want.Args(prefix), got, want)
			}
		}
	}
}
