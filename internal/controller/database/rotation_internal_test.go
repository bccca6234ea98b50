package database

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// loginsAsText is each login as "name login|keep|off", with its password
// when it has one.
func loginsAsText(logins []instanceapi.DeclaredRole) string {
	var out []string
	for _, l := range logins {
		s := l.Name + " "
		switch {
		case l.Login && l.KeepPassword:
			s += "keep"
		case l.Login:
			s += "login " + l.Password
		default:
			s += fmt.Sprintf("off ended=%v", l.EndSessions)
		}
		if l.ActAs != "" {
			s += " as " + l.ActAs
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// A rotation's states, as the role's Secret records them, and what the
// primary is asked in each: before any rotation the role alone; during
// the grace period the Secret's login and the previous one, which keeps
// its password; after it, the previous login off with its sessions ended.
// A rotation gives the other login a new password.
func TestRotationLogins(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	role := v1alpha1.DatabaseRole{Name: "api", Login: true}
	secret := func(user, previous string, rotated, ends time.Time) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}, Data: map[string][]byte{"username": []byte(user)}}
		if !rotated.IsZero() {
			s.Annotations[annRotatedAt] = rotated.Format(time.RFC3339)
			s.Annotations[annPreviousUser] = previous
			s.Annotations[annGraceEnds] = ends.Format(time.RFC3339)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		want   string
		rotate string
	}{
		{"never rotated", secret("api", "", time.Time{}, time.Time{}), "api login pw",
			"api keep, api_alt login NEW as api"},
		{"in grace", secret("api_alt", "api", now.Add(-time.Minute), now.Add(time.Minute)), "api keep, api_alt login pw as api",
			"api login NEW, api_alt keep as api"},
		{"after grace", secret("api_alt", "api", now.Add(-2*time.Hour), now.Add(-time.Hour)), "api off ended=true, api_alt login pw as api",
			"api login NEW, api_alt keep as api"},
		{"back on the role", secret("api", "api_alt", now.Add(-2*time.Hour), now.Add(-time.Hour)), "api login pw, api_alt off ended=true as api",
			"api keep, api_alt login NEW as api"},
		{"a Secret edited by hand", secret("mallory", "postgres", now.Add(-time.Minute), now.Add(time.Hour)), "api login pw, api_alt off ended=true as api",
			"api keep, api_alt login NEW as api"},
	} {
		rs := rotationOf(tc.secret, role.Name)
		logins := rs.logins(role, "pw", now)
		if got := loginsAsText(logins); got != tc.want {
			t.Errorf("%s: asked %q, want %q", tc.name, got, tc.want)
		}
		rotated, p, err := startRotation(role, rs, logins)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.ReplaceAll(loginsAsText(rotated), p.password, "NEW"); got != tc.rotate || len(p.password) < 32 || p.user == p.previous {
			t.Errorf("%s: a rotation asks %q (to %s from %s), want %q", tc.name, got, p.user, p.previous, tc.rotate)
		}
	}
}

// When a rotation is due: on request (a time after the last rotation, or
// after the Secret was made), on schedule, and never for a request that
// does not parse or a password that is the user's own.
func TestRotationDue(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	created := now.Add(-48 * time.Hour)
	rotated := rotation{user: "api_alt", rotatedAt: now.Add(-time.Hour)}
	daily := &v1alpha1.PasswordRotation{Schedule: "0 3 * * *"}
	for _, tc := range []struct {
		name     string
		ann      string
		rs       rotation
		rotation *v1alpha1.PasswordRotation
		own      bool
		due      bool
		next     time.Time
		problem  string
	}{
		{name: "nothing asked", rs: rotation{user: "api"}},
		{name: "asked after the Secret was made", ann: now.Add(-time.Minute).Format(time.RFC3339), rs: rotation{user: "api"}, due: true},
		{name: "asked before the Secret was made", ann: created.Add(-time.Minute).Format(time.RFC3339), rs: rotation{user: "api"}},
		{name: "asked before the last rotation", ann: now.Add(-2 * time.Hour).Format(time.RFC3339), rs: rotated},
		{name: "a request that does not parse", ann: "now", rs: rotated, problem: "must be an RFC 3339 time"},
		{name: "the user's own password", ann: now.Format(time.RFC3339), rs: rotation{user: "api"}, own: true, problem: "rotate it there"},
		{name: "scheduled, missed since the Secret was made", rs: rotation{user: "api"}, rotation: daily, due: true, next: created.Truncate(24 * time.Hour).Add(27 * time.Hour)},
		{name: "scheduled, not yet", rs: rotated, rotation: daily, next: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)},
		{name: "a schedule that does not parse", rs: rotated, rotation: &v1alpha1.PasswordRotation{Schedule: "every day"}, problem: "spec.roles[0].passwordRotation.schedule"},
	} {
		db := &v1alpha1.Database{}
		if tc.ann != "" {
			db.Annotations = map[string]string{v1alpha1.AnnotationRotatePrefix + "api": tc.ann}
		}
		role := v1alpha1.DatabaseRole{Name: "api", Login: true, PasswordRotation: tc.rotation}
		if tc.own {
			role.PasswordSecret = &v1alpha1.SecretReference{Name: "mine"}
		}
		due, next, problem := rotationDue(db, 0, role, tc.rs, created, now)
		if due != tc.due || !next.Equal(tc.next) || (problem == "") != (tc.problem == "") || !strings.Contains(problem, tc.problem) {
			t.Errorf("%s: due %v, next %v, problem %q; want %v, %v, %q", tc.name, due, next, problem, tc.due, tc.next, tc.problem)
		}
	}
}
