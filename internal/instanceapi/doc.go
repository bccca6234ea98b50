// Package instanceapi is the contract between the operator and the instance
// manager in each PostgreSQL pod: the HTTP port, paths and JSON types. Both
// sides import it, so a change here is a change to both.
package instanceapi
