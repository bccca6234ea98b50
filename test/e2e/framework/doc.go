// Package framework is the e2e harness: clients for the cluster under test,
// a fresh namespace per suite, waits, and helpers to run commands in pods.
package framework
