// Package instance is daytwo's in-pod instance manager: PID 1 of every
// PostgreSQL container. It initialises or clones the data directory, renders
// postgresql.conf and pg_hba.conf, supervises postgres, reloads changed
// configuration and answers the instanceapi HTTP contract.
package instance
