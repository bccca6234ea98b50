// Command gen-managed-rule writes the CRD rule that refuses the settings
// daytwo manages into api/v1alpha1/database_types.go, from
// v1alpha1.ManagedParameters (`make generate` runs it, from the
// repository's root).
package main

import (
	"fmt"
	"os"
	"strings"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

const (
	file   = "api/v1alpha1/database_types.go"
	prefix = `// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in [`
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen-managed-rule:", err)
		os.Exit(1)
	}
}

func run() error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	found := 0
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i] = v1alpha1.ManagedParametersMarker()
			found++
		}
	}
	if found != 1 {
		return fmt.Errorf("%s has %d lines that start with the rule's marker, want 1", file, found)
	}
	return os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600)
}
