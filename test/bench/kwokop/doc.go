// Package kwokop runs the operator binary against the kwok cluster for the
// scale benchmarks (bench-webapp, bench-database), as production runs it,
// and reads what they measure from it: metrics, the heap after a garbage
// collection, the client's write requests, reconcile latency.
package kwokop
