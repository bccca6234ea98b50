package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The writer's files, which the e2e framework (framework.Writer) shares.
const (
	writerLog = "/tmp/writer.log"
	writerRun = "/tmp/writer-run"
)

// Its pace and cap: a write every writerEvery from one start to the next
// (ten a second), each on a new connection, given up after writerCap; a
// pooled writer keeps its connection (a pool's client) and waits up to
// pooledCap, since a pool holds writes while it is paused.
const (
	writerEvery = 100 * time.Millisecond
	writerCap   = 500 * time.Millisecond
	pooledCap   = 5 * time.Second
)

// writer is an application as a failover sees it: while writerRun exists it
// inserts 1, 2, 3, ... into table through conninfo (with the libpq
// environment: PGPASSWORD, PGSSLMODE, PGSSLROOTCERT), one new connection
// per write (pooled: one connection, made again after a failure). It
// logs "A <id> <unix time> <start>" when a write is acknowledged,
// and "F <id> <unix time> <start> <why>" when one fails or times out
// ("timeout" at the cap), and "done" at its end. In Go, not a shell loop of
// psql: a fork of psql, timeout and date per write held the loop to two or
// three writes a second on a busy 2-core node, so every gap it measured
// carried a few hundred milliseconds of its own.
func writer(conninfo, table string, pooled bool) error {
	cfg, err := pgx.ParseConfig(conninfo)
	if err != nil {
		return err
	}
	log, err := os.OpenFile(writerLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	stamp := func(t time.Time) string { return fmt.Sprintf("%.6f", float64(t.UnixNano())/1e9) }
	insert := "INSERT INTO " + pgx.Identifier{table}.Sanitize() + " VALUES ($1)"
	var kept *pgx.Conn
	defer func() {
		if kept != nil {
			_ = kept.Close(context.Background())
		}
	}()
	for id := 1; ; id++ {
		if _, err := os.Stat(writerRun); err != nil {
			break
		}
		start := time.Now()
		var err error
		if pooled {
			ctx, cancel := context.WithTimeout(context.Background(), pooledCap)
			kept, err = writeKept(ctx, cfg, kept, insert, id)
			cancel()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), writerCap)
			err = writeOnce(ctx, cfg, insert, id)
			cancel()
		}
		end := time.Now()
		// One write call per line: a reader never sees half of one.
		if err == nil {
			_, _ = fmt.Fprintf(log, "A %d %s %s\n", id, stamp(end), stamp(start))
		} else {
			_, _ = fmt.Fprintf(log, "F %d %s %s %s\n", id, stamp(end), stamp(start), why(err))
		}
		time.Sleep(max(0, writerEvery-time.Since(start)))
	}
	_, err = fmt.Fprintln(log, "done")
	return err
}

// writeKept inserts id on conn, connecting first when it is nil; after a
// failure the connection is closed, and the next write makes another.
func writeKept(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn, insert string, id int) (*pgx.Conn, error) {
	var err error
	if conn == nil {
		if conn, err = pgx.ConnectConfig(ctx, cfg.Copy()); err != nil {
			return nil, err
		}
	}
	if _, err = conn.Exec(ctx, insert, id); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// writeOnce inserts id on a connection of its own.
func writeOnce(ctx context.Context, cfg *pgx.ConnConfig, insert string, id int) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, insert, id)
	return err
}

// why is err on one line (pgx puts the cause of a failed connect on the
// next), at most 300 bytes, or "timeout" at the cap.
func why(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if len(msg) > 300 {
		msg = msg[:300]
	}
	return msg
}
