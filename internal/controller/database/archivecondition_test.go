package database

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// ContinuousArchiving turns True only once the primary runs in archive
// mode: a first base backup started while it restarts into it failed with
// pg_basebackup's "connection refused".
func TestArchivingReportedOnlyOnceThePrimaryRunsInArchiveMode(t *testing.T) {
	running := instanceapi.Status{Phase: instanceapi.PhaseRunning, Archive: &instanceapi.ArchiveStatus{}}
	pending := running
	pending.PendingRestartSettings = []string{"archive_mode"}
	restarting := running
	restarting.Phase = instanceapi.PhaseStarting
	for _, c := range []struct {
		name string
		s    instanceapi.Status
		want bool
	}{
		{"archive_mode waits for the restart", pending, false},
		{"the primary restarts", restarting, false},
		{"the primary runs in archive mode", running, true},
	} {
		obs := &observation{View: ha.View{Primary: "db-0", Instances: map[string]instanceapi.Status{"db-0": c.s}}}
		obs.plan.archive = &archivePlan{backup: "nightly"}
		got, reason := false, ""
		setArchiveCondition(&v1alpha1.Database{}, obs, func(typ string, ok bool, r, _ string) {
			if typ == v1alpha1.ConditionContinuousArchiving {
				got, reason = ok, r
			}
		})
		if got != c.want {
			t.Errorf("%s: ContinuousArchiving %v (%s), want %v", c.name, got, reason, c.want)
		}
	}
}

// The archive's series key is projected for S3 and volume archives alike,
// and a private CA beside the S3 credentials, under the names the instance
// manager reads.
func TestArchiveProjectsItsKeyAndAPrivateCA(t *testing.T) {
	volume := plan{archive: &archivePlan{storagePlan: storagePlan{claim: "archive", keySecret: "nightly-series-key", keyKey: "key"}}}
	if got := archiveSecrets(volume); len(got) != 1 || *got[0].Secret.Name != "nightly-series-key" ||
		*got[0].Secret.Items[0].Path != instanceapi.SecretArchiveSeriesKey {
		t.Fatalf("volume archive projections %+v", got)
	}
	p := plan{archive: &archivePlan{storagePlan: storagePlan{s3Secret: "s3", idKey: "id", secretKey: "key", keySecret: "nightly-series-key", keyKey: "key"}}}
	if n := len(archiveSecrets(p)); n != 2 {
		t.Fatalf("%d projections without a CA, want 2", n)
	}
	p.archive.ca = &v1alpha1.SecretKeyRef{Name: "minio-ca"}
	got := archiveSecrets(p)
	if len(got) != 3 || *got[2].Secret.Name != "minio-ca" || *got[2].Secret.Items[0].Key != "ca.crt" ||
		*got[2].Secret.Items[0].Path != instanceapi.SecretArchiveCA {
		t.Fatalf("projections %+v", got)
	}
	p.archive.enc = &v1alpha1.SecretKeyRef{Name: "enc-key"}
	got = archiveSecrets(p)
	if len(got) != 4 || *got[1].Secret.Name != "enc-key" || *got[1].Secret.Items[0].Key != "key" ||
		*got[1].Secret.Items[0].Path != instanceapi.SecretArchiveEncryptionKey {
		t.Fatalf("projections with an encryption key %+v", got)
	}
}

// status.walArchive says what the primary last archived, and never moves
// back: a manager that starts again, or a new primary, knows of nothing
// archived yet. Another DatabaseBackup starts a new record.
func TestWALArchiveRecordNeverMovesBack(t *testing.T) {
	at := func(s int) *time.Time { v := time.Date(2026, 11, 28, 9, 0, s, 500, time.UTC); return &v }
	st := &v1alpha1.DatabaseStatus{}
	setWALArchive(st, "nightly", nil)
	if w := st.WALArchive; w == nil || w.Backup != "nightly" || w.LastArchivedTime != nil {
		t.Fatalf("before anything is archived: %+v", w)
	}
	setWALArchive(st, "nightly", &instanceapi.ArchiveStatus{LastArchived: "000000010000000000000003", LastArchivedTime: at(10)})
	for _, a := range []*instanceapi.ArchiveStatus{nil, {}, {LastArchived: "000000010000000000000002", LastArchivedTime: at(5)}} {
		setWALArchive(st, "nightly", a)
	}
	if w := st.WALArchive; w.LastArchivedWAL != "000000010000000000000003" || !w.LastArchivedTime.Time.Equal(at(10).Truncate(time.Second)) {
		t.Fatalf("the record moved back: %+v", w)
	}
	setWALArchive(st, "nightly", &instanceapi.ArchiveStatus{LastArchived: "000000020000000000000004", LastArchivedTime: at(20)})
	if w := st.WALArchive; w.LastArchivedWAL != "000000020000000000000004" {
		t.Fatalf("a newer archive was not taken: %+v", w)
	}
	setWALArchive(st, "weekly", nil)
	if w := st.WALArchive; w.Backup != "weekly" || w.LastArchivedWAL != "" {
		t.Fatalf("another DatabaseBackup kept the old record: %+v", w)
	}
}

func TestArchiveFailureSaysWhenTheVolumeFills(t *testing.T) {
	s := &instanceapi.ArchiveStatus{Failed: 3, LastError: "bucket wal: no such bucket", Pending: 5, PendingBytes: 80 << 20,
		VolumeFreeBytes: 2 << 30, TimeToFullSeconds: 5400}
	got := archiveFailure("ledger-0", "ledger-pitr", s)
	for _, want := range []string{"ledger-0", "ledger-pitr", "3 failures", "no such bucket", "5 files (80 MiB) wait in pg_wal",
		"2048 MiB free", "fills in about 1h30m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	s.TimeToFullSeconds = 0
	if got := archiveFailure("ledger-0", "ledger-pitr", s); strings.Contains(got, "fills") {
		t.Errorf("no growth, yet %q", got)
	}
}
