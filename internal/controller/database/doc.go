// Package database reconciles Databases: the StatefulSet of PostgreSQL pods
// run by the daytwo instance manager, its Services, Secrets and
// configuration, and the Day-2 work around them.
//
// A reconcile (controller.go, reconcileNormal) runs a list of phases
// (steps.go: steps, and availabilitySteps for a Database whose spec is
// invalid), in this order; each file holds one concern:
//
//   - children.go: validate the spec, the children another owner holds
//     (refused, not taken), and the StatefulSet, budget and role labels
//     applied; secrets.go: the credentials and replication Secrets;
//   - observe.go: the observation (the world the phases act on) and
//     observe, which reads the StatefulSet, pods and upgrade objects into
//     it and asks each instance manager for its status; it decides
//     nothing (the image step does, after it);
//   - tls.go, apitls.go: the server certificate PostgreSQL serves and the
//     instance API's mutual TLS;
//   - lease.go: the primary Lease (created once; its holder is the one fact
//     failover changes), the instance managers' RBAC for it, and the Lease
//     events a reconcile follows;
//   - archive.go: continuous WAL archiving to the Database's Physical
//     DatabaseBackup, and a restore's source;
//   - plan.go, podtemplate.go, resources.go, names.go: what the spec and
//     its size tier render (the plan; the StatefulSet and its pod
//     template; the Services, ConfigMaps, PodDisruptionBudgets, RBAC and
//     credentials; the children's names and labels);
//   - status.go: the findings (what each phase decided or found) and
//     the status, built from them and the observation at the end;
//   - majorupgrade.go: a major version upgrade with pg_upgrade, and its
//     rollback; upgradejob.go runs pg_upgrade's Job, preupgradebackup.go
//     takes the backup before it;
//   - high availability lives in internal/ha: its Actor moves the primary
//     Lease and calls the instance managers (Failover: the primary lost
//     its lease; Switchover: one requested, or one a node drain, a
//     scale-down or a rollout of the primary needs), on the observation's
//     ha.View; hahost.go is this controller's side of it (the pods and the
//     instance API), lease.go creates the Lease;
//   - inplace.go, inplacestate.go, rollout.go: settings that need a
//     restart, rolled instance by instance (and what the operator
//     remembers of them between reconciles), and image rollouts, replicas
//     first, with rollback;
//   - storage.go: volume growth;
//   - roles.go (spec.roles and each login role's Secret) and databases.go
//     (spec.databases), asked of the primary's instance manager;
//     declared.go reports both in the status;
//   - managedbackup.go: spec.backup's DatabaseBackup;
//   - delete.go: deletionPolicy, with the final backup of Snapshot;
//   - metrics.go: the operator's Database metrics.
//
// Each source file has its test file beside it (_internal_test.go for the
// package's own tests where an envtest file already takes the name).
//
// Each phase may ask to be called again, or end the reconcile; runSteps
// merges what they asked one way: the soonest delay (controller.Soonest).
package database
