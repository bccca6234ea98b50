// Package series derives, from a DatabaseBackup, what every Pod and Job that
// reads or writes its backups needs: where the series is stored (prefix,
// location), its keys, and the daytwo flags, environment and volumes that
// reach the storage. The DatabaseBackup controller's Jobs and the Database
// controller's instances (archiving, restores) share it.
package series
