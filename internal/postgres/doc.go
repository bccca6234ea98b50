// Package postgres holds daytwo's PostgreSQL knowledge that needs no
// connection: the size tiers, the tuning formula, which settings need a
// restart, version rules and SCRAM password verifiers. The operator and the
// instance manager both use it, so they agree on every rule.
package postgres
