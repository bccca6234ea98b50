package database

import (
	"strings"
	"testing"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A setting daytwo manages is refused by the controller too (a CRD not
// yet upgraded lets it through), naming the field; others pass.
func TestValidateRefusesManagedParameters(t *testing.T) {
	db := &v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{Version: "17",
		Parameters: v1alpha1.Parameters{"work_mem": "64MB", "ssl_key_file": "/tmp/k", "archive_command": "true"}}}
	got := validate(db, newPlan(db))
	if !strings.Contains(got, "spec.parameters.archive_command is a setting daytwo manages") {
		t.Errorf("validate = %q, want the first managed setting named", got)
	}
	db.Spec.Parameters = v1alpha1.Parameters{"work_mem": "64MB"}
	if got := validate(db, newPlan(db)); got != "" {
		t.Errorf("validate = %q for a setting daytwo does not manage", got)
	}
}
