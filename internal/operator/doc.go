// Package operator wires daytwo's controllers into a controller-runtime
// manager. The daytwo operator command and the integration tests share it, so
// the tests run exactly the wiring users run.
package operator
