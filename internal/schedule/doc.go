// Package schedule parses DatabaseBackup cron schedules the one way daytwo
// reads them everywhere: five fields or a descriptor, in a time zone.
package schedule
