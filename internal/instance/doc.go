// Package instance is daytwo's in-pod instance manager: PID 1 of every
// PostgreSQL container. It initialises or clones the data directory, renders
// postgresql.conf and pg_hba.conf, supervises postgres, reloads changed
// configuration and answers the instanceapi HTTP contract.
//
// Each file holds one concern; its test file sits beside it
// (_internal_test.go for the package's own tests where a test of the
// running manager already takes the name):
//
//   - the manager and its run: manager.go (Manager, Run, and the state
//     its goroutines share, under shared.mu, apart from what the
//     supervisor and the monitor own alone), config.go (the flags'
//     configuration, postgresql.conf), status.go (GET /status);
//   - the data directory: data.go (ensure it exists, refuse to replace data
//     a Database served), bootstrap.go (initdb, clone, import), identity.go
//     (which Database made it), restore.go and recovery.go (a logical
//     restore, a point-in-time recovery), upgrade.go and upgradeswap.go
//     (pg_upgrade, and putting the old data back);
//   - the PostgreSQL process: process.go (supervise, restart in place,
//     shut down), monitor.go (watch the running server, read its
//     positions), kill.go and reaper.go (PID 1's duties), ping.go;
//   - high availability: role.go (learn the role from the Lease, rejoin
//     with pg_rewind), fence.go (heartbeat, renew the Lease, fence when it
//     cannot), lease.go (the Lease, through the Kubernetes API), holder.go
//     (follow the holder), follow.go, slots.go and timeline.go (can this
//     replica follow: slots, removed WAL, forked timelines), promote.go,
//     switchover.go (demote and hand over), forward.go (relay clients to
//     the next primary), outage.go, vouch.go and promise.go (serve through
//     an API-server outage on the peers' promises), sync.go (synchronous
//     replication), floors.go (settings a standby must keep at its
//     primary's values);
//   - the WAL archive: archive.go (archive_command through the manager),
//     backlog.go (how long until the volume fills), restorewal.go (a
//     standby's restore_command from the archive);
//   - what a team declares: roles.go (spec.roles: make, put back drift,
//     drop) and databases.go (spec.databases: owner, schemas, extensions),
//     applied on the primary when the operator asks;
//   - the HTTP API and TLS: server.go (routes, readiness), tls.go,
//     metrics.go.
package instance
