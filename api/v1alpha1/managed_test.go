package v1alpha1_test

import (
	"os"
	"strings"
	"testing"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// The CRD's rule is the one ManagedParameters makes: a setting added to
// the list and not regenerated (`make generate`) fails here.
func TestManagedParametersRuleIsGenerated(t *testing.T) {
	b, err := os.ReadFile("database_types.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\n"+v1alpha1.ManagedParametersMarker()+"\n") {
		t.Fatal("database_types.go does not carry the rule ManagedParameters makes: run `make generate`")
	}
	for _, name := range []string{"port", "ssl_key_file", "archive_command", "jit_provider"} {
		if !v1alpha1.IsManagedParameter(name) {
			t.Errorf("%s is not managed", name)
		}
	}
	if v1alpha1.IsManagedParameter("work_mem") {
		t.Error("work_mem is managed")
	}
}
