// Package ha is daytwo's high availability, the operator's side of the
// primary-lease protocol it shares with the instance managers:
//
//   - the rules, pure: when a lease has expired (LeaseState), which replica
//     a failover promotes (DecideFailover, failover.go), when a switchover
//     may go and to whom (decideSwitchover), and when a holder must have
//     fenced (ServeUntil, fence.go);
//   - the Actor, which carries them out for the Database controller: it
//     moves the Lease and asks the instance managers to promote and to step
//     down (failoveractor.go, switchoveractor.go, promote.go), on the View
//     of one Database that the controller observed (view.go), through the
//     controller's Host for the pods and the instance API (actor.go).
//
// Its tests include a seeded simulation of the whole protocol
// (sim_test.go).
package ha
