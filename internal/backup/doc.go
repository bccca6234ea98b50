// Package backup is daytwo's logical backup data path: storage backends (S3
// through minio-go, or a directory on a volume), the stream from pg_dump into
// storage with a SHA-256 computed on the way, the manifest that makes a
// backup exist, grandfather-father-son retention, and the verified restore
// stream into pg_restore.
package backup
