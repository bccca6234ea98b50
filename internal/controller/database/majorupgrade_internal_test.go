package database

import (
	"strings"
	"testing"
)

func TestDecideUpgrade(t *testing.T) {
	base := upgradeFacts{from: "15", to: "17", primary: "db-0", primary0: "db-0", primaryServing: true}
	with := func(change func(*upgradeFacts)) upgradeFacts {
		f := base
		change(&f)
		return f
	}
	for _, c := range []struct {
		name string
		f    upgradeFacts
		want upgradeAction
		why  string
	}{
		{"a new version stops the instances", base, upgradeStop, ""},
		{"stopped: the Job runs", with(func(f *upgradeFacts) { f.upgrading = true }), upgradeRunJob, ""},
		{"stopped, Job running", with(func(f *upgradeFacts) { f.upgrading, f.job = true, jobRunning }), upgradeRunJob, ""},
		{"the Job succeeded", with(func(f *upgradeFacts) { f.upgrading, f.job = true, jobSucceeded }), upgradeFinish, ""},
		{"the Job failed", with(func(f *upgradeFacts) { f.upgrading, f.job = true, jobFailed }), upgradeAbort, ""},
		{"a failed version is not tried again", with(func(f *upgradeFacts) { f.failedTo = "17" }), upgradeHold, ""},
		{"a retry after a failure is", with(func(f *upgradeFacts) { f.failedTo, f.retry = "17", true }), upgradeStop, ""},
		{"another version after a failure is", with(func(f *upgradeFacts) { f.failedTo, f.to = "17", "18" }), upgradeStop, ""},
		{"no second Job beside an old one", with(func(f *upgradeFacts) { f.job = jobRunning }), upgradeHold, "still runs"},
		{"the primary must start first", with(func(f *upgradeFacts) { f.primary = "db-1" }), upgradeHold, "switch over to db-0"},
		{"the backup first", with(func(f *upgradeFacts) { f.backup = backupWanted }), upgradeBackup, ""},
		{"the backup runs", with(func(f *upgradeFacts) { f.backup = backupRunning }), upgradeBackup, ""},
		{"the backup is stored", with(func(f *upgradeFacts) { f.backup = backupDone }), upgradeStop, ""},
		{"a failed backup holds", with(func(f *upgradeFacts) { f.backup, f.backupWhy = backupFailed, "no space" }), upgradeHold, "no space"},
		{"not while the primary is promoting", with(func(f *upgradeFacts) { f.primaryServing = false }), upgradeHold, "does not serve"},
		{"not with a WAL archive", with(func(f *upgradeFacts) { f.archivedBy = "pitr" }), upgradeHold, "Physical DatabaseBackup pitr"},
		{"no primary known", with(func(f *upgradeFacts) { f.primary = "" }), upgradeHold, "no primary"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why := decideUpgrade(c.f)
			if got != c.want || (c.why == "") != (why == "") || c.why != "" && !strings.Contains(why, c.why) {
				t.Fatalf("decideUpgrade(%+v) = %d %q, want %d %q", c.f, got, why, c.want, c.why)
			}
		})
	}
}
