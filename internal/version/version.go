// Package version carries the build's version, set by the linker:
// -X github.com/daytwo-dev/daytwo/internal/version.Version=v0.1.0
package version

// Version of this build; "dev" when built without the linker flag.
var Version = "dev"
