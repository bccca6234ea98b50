// Package e2e holds the end-to-end suites (build tag e2e). They run against a
// live cluster named by KUBECONFIG: the kwok cluster (control plane only) or
// the real node (real pods), as DAYTWO_E2E_MODE says.
package e2e
