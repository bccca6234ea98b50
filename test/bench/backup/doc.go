// Package backup is the backup benchmark (make bench-backup): daytwo's
// streaming backup and restore against MinIO, next to raw pg_dump and
// pg_restore on the same server (the floor) and pgBackRest to the same MinIO
// (a peer). It prints figures, not pass or fail.
package backup
