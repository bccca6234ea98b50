// Package databasebackup reconciles DatabaseBackups: scheduled backup Jobs,
// retention, staleness and verification restores.
package databasebackup
