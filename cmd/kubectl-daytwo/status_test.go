package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// The status shows the window a restore can reach from each DatabaseBackup,
// and what the primary last archived, so a user sees the recovery point
// objective without reading the bucket.
func TestStatusShowsTheRecoverabilityWindow(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	db.Status.WALArchive = &v1alpha1.WALArchiveStatus{Backup: "orders-backup", LastArchivedWAL: "000000020000000000000031",
		LastArchivedTime: &metav1.Time{Time: now.Add(-40 * time.Second)}}
	backups := []v1alpha1.DatabaseBackup{
		{ObjectMeta: metav1.ObjectMeta{Name: "orders-backup"}, Spec: v1alpha1.DatabaseBackupSpec{Method: v1alpha1.BackupMethodPhysical},
			Status: v1alpha1.DatabaseBackupStatus{Recoverability: &v1alpha1.Recoverability{
				FirstPoint: metav1.Time{Time: now.Add(-49 * time.Hour)}, LastPoint: metav1.Time{Time: now.Add(-40 * time.Second)}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "never-ran"}},
	}
	var out bytes.Buffer
	printStatus(&out, db, backups, now)
	got := out.String()
	for _, want := range []string{
		"RECOVERABLE (UTC)",
		"2026-11-26 09:00:00 to 2026-11-28 09:59:20",
		"WAL archive  000000020000000000000031 at 2026-11-28T09:59:20Z (40s ago), to DatabaseBackup orders-backup",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the status lacks %q:\n%s", want, got)
		}
	}
	if line := lineOf(got, "never-ran"); !strings.Contains(line, " - ") {
		t.Errorf("a DatabaseBackup without a backup shows a window: %q", line)
	}
}

func lineOf(s, prefix string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
