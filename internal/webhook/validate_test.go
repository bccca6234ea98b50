package webhook_test

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/webhook"
)

func TestValidateDatabase(t *testing.T) {
	sync := func(d v1alpha1.DataDurability) *v1alpha1.DatabaseReplication {
		return &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 1, DataDurability: d}}
	}
	cases := []struct {
		name string
		spec v1alpha1.DatabaseSpec
		want string // a field the error names; "" admits
	}{
		{"a plain Database", v1alpha1.DatabaseSpec{Version: "17"}, ""},
		{"an image of another major", v1alpha1.DatabaseSpec{Version: "17", Image: "postgres:15.4"}, "spec.image"},
		{"a backup schedule the scheduler cannot read", v1alpha1.DatabaseSpec{Version: "17",
			Backup: &v1alpha1.DatabaseBackupPolicy{Schedule: "61 * * * *"}}, "spec.backup.schedule"},
		{"a backup time zone the tz database lacks", v1alpha1.DatabaseSpec{Version: "17",
			Backup: &v1alpha1.DatabaseBackupPolicy{Schedule: "@daily", TimeZone: ptr.To("Mars/Olympus")}}, "spec.backup.timeZone"},
		{"a backup in a real time zone", v1alpha1.DatabaseSpec{Version: "17",
			Backup: &v1alpha1.DatabaseBackupPolicy{Schedule: "0 3 * * *", TimeZone: ptr.To("Europe/Paris")}}, ""},
		{"synchronous_commit off voids required durability", v1alpha1.DatabaseSpec{Version: "17", Replication: sync(v1alpha1.DataDurabilityRequired),
			Parameters: v1alpha1.Parameters{"synchronous_commit": "off"}}, "spec.parameters.synchronous_commit"},
		{"synchronous_commit local voids the default (required) durability", v1alpha1.DatabaseSpec{Version: "17", Replication: sync(""),
			Parameters: v1alpha1.Parameters{"synchronous_commit": "Local"}}, "spec.parameters.synchronous_commit"},
		{"synchronous_commit off with preferred durability is the user's choice", v1alpha1.DatabaseSpec{Version: "17", Replication: sync(v1alpha1.DataDurabilityPreferred),
			Parameters: v1alpha1.Parameters{"synchronous_commit": "off"}}, ""},
		{"synchronous_commit remote_apply keeps required durability", v1alpha1.DatabaseSpec{Version: "17", Replication: sync(v1alpha1.DataDurabilityRequired),
			Parameters: v1alpha1.Parameters{"synchronous_commit": "remote_apply"}}, ""},
	}
	for _, c := range cases {
		err := webhook.ValidateDatabase(&v1alpha1.Database{Spec: c.spec})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		}
	}
}
