package database

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// The primary's planned restart waits outside the windows, goes inside
// one, and goes at once for the revision the annotation approves.
func TestMaintenanceHoldsThePrimary(t *testing.T) {
	db := &v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{Maintenance: &v1alpha1.DatabaseMaintenance{
		Schedule: "0 2 * * *", Duration: &metav1.Duration{Duration: time.Hour}, TimeZone: "Europe/Berlin"}}}
	at := func(s string) time.Time {
		t0, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return t0
	}
	for _, tc := range []struct {
		name, now, approved string
		wait                time.Duration
	}{
		{"inside the window", "2026-11-29T01:30:00Z", "", 0}, // 02:30 in Berlin
		{"at its opening", "2026-11-29T01:00:00Z", "", 0},
		{"just after it", "2026-11-29T02:00:00Z", "", 23 * time.Hour},
		{"before it", "2026-11-28T23:00:00Z", "", 2 * time.Hour},
		{"approved revision", "2026-11-29T12:00:00Z", "rev-2", 0},
		{"another revision approved", "2026-11-29T12:00:00Z", "rev-1", 13 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := db.DeepCopy()
			if tc.approved != "" {
				d.Annotations = map[string]string{v1alpha1.AnnotationApprovePrimaryUpdate: tc.approved}
			}
			wait, why := maintenanceHold(d, "rev-2", at(tc.now))
			if wait != tc.wait || (tc.wait > 0) != (why != "") {
				t.Fatalf("wait %s (%q), want %s", wait, why, tc.wait)
			}
			if why != "" && !strings.Contains(why, v1alpha1.AnnotationApprovePrimaryUpdate+"=rev-2") {
				t.Errorf("the message does not say how to approve: %q", why)
			}
		})
	}
	if wait, why := maintenanceHold(&v1alpha1.Database{}, "rev-2", time.Now()); wait != 0 || why != "" {
		t.Errorf("without spec.maintenance the primary waited: %s (%q)", wait, why)
	}
	if maintenanceProblem(&v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{
		Maintenance: &v1alpha1.DatabaseMaintenance{Schedule: "0 2 * *"}}}) == "" {
		t.Error("a four-field schedule was accepted")
	}
}

// A newer operator's pinned default is never a minor downgrade.
func TestDefaultImageNeverDowngrades(t *testing.T) {
	running := []v1alpha1.InstanceStatus{{Name: "db-0", PostgresVersion: "17.13 (Debian 17.13-1)"}}
	for image, want := range map[string]bool{"postgres:17.12": true, "postgres:17.13": false, "postgres:17.14": false, "postgres:17": false} {
		if got := olderThanRunning(image, "", "", running); got != want {
			t.Errorf("olderThanRunning(%s) = %v, want %v", image, got, want)
		}
	}
	// With no instance answering, the images say it.
	if !olderThanRunning("postgres:17.12", "ghcr.io/x/postgres:17.13", "", nil) || olderThanRunning("postgres:17.12", "postgres:17", "", nil) {
		t.Error("the template's release was not weighed")
	}
}
