// Package ha holds the rules of the primary-lease protocol that the
// operator and the instance managers share: when a lease has expired, which
// replica a failover promotes, and when a holder must have fenced. Its tests
// include a seeded simulation of the whole protocol (sim_test.go).
package ha
