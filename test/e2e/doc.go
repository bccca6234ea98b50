// Package e2e holds the end-to-end suites (build tag e2e). They run against a
// live cluster named by KUBECONFIG: the kwok cluster (control plane only) or
// the real node (real pods), as DAYTWO_E2E_MODE says.
//
// Each suite works in a namespace of its own (Cluster.Namespace), so most
// call t.Parallel: most of their time is waiting on pods, not CPU. A suite
// that disturbs the whole cluster stays serial, and Go runs the serial ones
// first, alone: the API server outage and the control plane's supervision
// (controlplane_test.go), the operator killed again and again
// (restart_test.go), the operator upgraded to another image
// (TestDatabaseSmallLifecycle), the node cordoned and the operator scaled
// to zero (TestDatabaseMediumUpgradeAndRollback), the partitions, whose
// timing is the point (partition_test.go), and the kwok placement, whose
// volumes another suite's claims could bind (placement_test.go). A new
// suite is parallel unless it does one of those; a parallel one reserves
// the CPU its pods request (Cluster.ReserveCPU).
package e2e
