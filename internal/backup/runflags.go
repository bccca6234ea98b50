package backup

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// RunFlags are the flags of `daytwo backup run`: the operator renders a
// backup Job's with Args and the daytwo binary parses them with Bind, so
// both sides read one definition. A field left zero is left out of Args,
// and the binary's default applies.
type RunFlags struct {
	// Storage is the series' storage (unprefixed flags).
	Storage instanceapi.StorageFlags
	// ID is the backup's; empty means the current UTC time (NewID).
	ID string
	// LockWaitTimeout bounds pg_dump's wait for a table lock.
	LockWaitTimeout time.Duration
	// TerminationLog receives the Result for the operator.
	TerminationLog string
	Retention      Retention
	// Compression is a logical backup's; Level 0 is the algorithm's
	// default.
	Compression Compression
	// Physical takes a base backup instead of a logical one.
	Physical bool
	// RolesUser reads the roles' password verifiers (RolesPasswordEnv is
	// its password).
	RolesUser string
	// SwitchWALHost is a standby's primary, asked to finish WAL segments
	// so a base backup taken from the standby can end.
	SwitchWALHost string
}

// Args renders r as `daytwo backup run`'s flags.
func (r RunFlags) Args() []string { return instanceapi.ArgsOf(r, (*RunFlags).Bind) }

// Bind defines r's flags on f, with the binary's defaults.
func (r *RunFlags) Bind(f *pflag.FlagSet) {
	r.Storage.Bind(f, "")
	f.StringVar(&r.ID, "id", "", "Backup ID; defaults to the current UTC time.")
	f.DurationVar(&r.LockWaitTimeout, "lock-wait-timeout", DefaultLockWaitTimeout, "How long pg_dump waits for a table lock before it fails.")
	f.StringVar(&r.TerminationLog, "termination-log", "/dev/termination-log", "Where the result goes for the operator; empty for none.")
	f.IntVar(&r.Retention.KeepLast, "keep-last", 0, "Retention: newest backups to keep.")
	f.IntVar(&r.Retention.KeepDaily, "keep-daily", 0, "Retention: days to keep one backup of.")
	f.IntVar(&r.Retention.KeepWeekly, "keep-weekly", 0, "Retention: weeks to keep one backup of.")
	f.IntVar(&r.Retention.KeepMonthly, "keep-monthly", 0, "Retention: months to keep one backup of.")
	f.StringVar(&r.Compression.Algorithm, "compression", DefaultCompression.Algorithm, "Compression of a logical backup: none, gzip or zstd, done on the stream pg_dump writes.")
	f.IntVar(&r.Compression.Level, "compression-level", 0, "Compression level (gzip 1-9, zstd 1-22); 0 means the algorithm's default.")
	f.BoolVar(&r.Physical, "physical", false, "Take a base backup with pg_basebackup (the Database archives its WAL to the same storage).")
	f.StringVar(&r.RolesUser, "roles-user", "", "A logical backup reads the roles with their password verifiers as this user "+
		"(one that may read pg_authid in database postgres); without it, or if it cannot, they are backed up without passwords.")
	f.StringVar(&r.SwitchWALHost, "switch-wal-host", "", "With --physical from a standby (PGHOST): its primary, asked to finish WAL segments so the backup can end.")
}
