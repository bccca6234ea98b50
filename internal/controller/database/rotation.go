package database

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

// Password rotation alternates a login role's Secret between the role
// and its twin (v1alpha1.RotationTwin), which logs in and acts as the
// role. A rotation gives the login the Secret does not hold a new
// password, and only once the primary has it moves the Secret to it; the
// login it leaves keeps its password for the grace period, then may no
// longer log in and its sessions end. The role's Secret records where
// the rotation stands, in these annotations: it is the object whose
// content they describe, and a lost one is rebuilt as "never rotated",
// which at worst rotates once more.
const (
	annRotatedAt    = "daytwo.dev/rotated-at"
	annPreviousUser = "daytwo.dev/previous-username"
	annGraceEnds    = "daytwo.dev/grace-ends"
)

// rotation is where a login role's password rotation stands.
type rotation struct {
	// user is the login the Secret holds: the role, or its twin.
	user string
	// previous is the login the last rotation moved from, which works
	// until graceEnds.
	previous  string
	graceEnds time.Time
	// rotatedAt is the last rotation; zero for none (no twin yet).
	rotatedAt time.Time
}

// rotationOf reads role's rotation from its Secret (nil: none yet).
func rotationOf(s *corev1.Secret, role string) rotation {
	rs := rotation{user: role}
	if s == nil {
		return rs
	}
	at, err := time.Parse(time.RFC3339, s.Annotations[annRotatedAt])
	if err != nil {
		return rs
	}
	rs.rotatedAt = at
	if u := string(s.Data[v1alpha1.CredentialsUser]); u == v1alpha1.RotationTwin(role) {
		rs.user = u
	}
	if p := s.Annotations[annPreviousUser]; p == role || p == v1alpha1.RotationTwin(role) {
		rs.previous = p
		rs.graceEnds, _ = time.Parse(time.RFC3339, s.Annotations[annGraceEnds])
	}
	return rs
}

// other is the login a rotation moves the Secret to.
func (rs rotation) other(role string) string {
	if rs.user == role {
		return v1alpha1.RotationTwin(role)
	}
	return role
}

// logins are the declared role and, once it was rotated, its twin, as
// the primary applies them now: the Secret's login with its password,
// the previous one while its grace period lasts, and no login (its
// sessions ended) for a login neither.
func (rs rotation) logins(role v1alpha1.DatabaseRole, password string, now time.Time) []instanceapi.DeclaredRole {
	main := apiRole(role, password)
	if rs.rotatedAt.IsZero() {
		return []instanceapi.DeclaredRole{main}
	}
	out := []instanceapi.DeclaredRole{main, twinLogin(role, main)}
	for i := range out {
		l := &out[i]
		switch {
		case l.Name == rs.user:
		case l.Name == rs.previous && now.Before(rs.graceEnds):
			l.Password, l.KeepPassword = "", true
		default:
			l.Login, l.Password, l.EndSessions = false, "", true
		}
	}
	return out
}

// twinLogin is role's twin: a login that acts as the role (a member
// that SETs ROLE to it), as limited as main.
func twinLogin(role v1alpha1.DatabaseRole, main instanceapi.DeclaredRole) instanceapi.DeclaredRole {
	twin := main
	twin.Name, twin.CreateDB, twin.Inherit, twin.InRoles, twin.ActAs = v1alpha1.RotationTwin(role.Name), false, true, []string{role.Name}, role.Name
	return twin
}

// rotationDue says whether role's password is due a rotation at now, by
// request (the annotation) or schedule, and when the next scheduled one
// is; a request that cannot be read, or a schedule, is a problem.
func rotationDue(db *v1alpha1.Database, i int, role v1alpha1.DatabaseRole, rs rotation, created, now time.Time) (due bool, next time.Time, problem string) {
	last := rs.rotatedAt
	if last.IsZero() {
		last = created
	}
	if raw, ok := db.Annotations[v1alpha1.AnnotationRotatePrefix+role.Name]; ok {
		at, err := time.Parse(time.RFC3339, raw)
		switch {
		case at.After(last) && v1alpha1.TwinProblem(role.Name) != "":
			problem = fmt.Sprintf("annotation %s%s: the password cannot rotate: %s", v1alpha1.AnnotationRotatePrefix, role.Name, v1alpha1.TwinProblem(role.Name))
		case err != nil:
			problem = fmt.Sprintf("annotation %s%s must be an RFC 3339 time", v1alpha1.AnnotationRotatePrefix, role.Name)
		case role.PasswordSecret != nil:
			problem = fmt.Sprintf("annotation %s%s: the password is Secret %s's; rotate it there", v1alpha1.AnnotationRotatePrefix, role.Name, role.PasswordSecret.Name)
		case at.After(last):
			due = true
		}
	}
	if role.PasswordRotation == nil || role.PasswordRotation.Schedule == "" {
		return due, time.Time{}, problem
	}
	sched, err := schedule.Parse(role.PasswordRotation.Schedule, "")
	if err != nil {
		return due, time.Time{}, fmt.Sprintf("spec.roles[%d].passwordRotation.schedule: %v", i, err)
	}
	if why := v1alpha1.TwinProblem(role.Name); why != "" {
		return false, time.Time{}, fmt.Sprintf("spec.roles[%d].passwordRotation: %s", i, why)
	}
	next = sched.Next(last)
	return due || !next.After(now), next, problem
}

// rotationGrace is role's grace period.
func rotationGrace(role v1alpha1.DatabaseRole) time.Duration {
	if r := role.PasswordRotation; r != nil && r.GracePeriod != nil {
		return r.GracePeriod.Duration
	}
	return v1alpha1.DefaultRotationGrace
}

// pendingRotation is a rotation asked of the primary, to be recorded in
// the Secret once the primary applied it.
type pendingRotation struct {
	role     string
	user     string
	password string
	previous string
	grace    time.Duration
}

// startRotation changes logins, as rs.logins made them, into a rotation:
// the other login gets a new password, the Secret's keeps its own.
func startRotation(role v1alpha1.DatabaseRole, rs rotation, logins []instanceapi.DeclaredRole) ([]instanceapi.DeclaredRole, *pendingRotation, error) {
	pw, err := postgres.Password()
	if err != nil {
		return nil, nil, err
	}
	p := &pendingRotation{role: role.Name, user: rs.other(role.Name), password: pw, previous: rs.user, grace: rotationGrace(role)}
	if len(logins) == 1 {
		logins = append(logins, twinLogin(role, logins[0]))
	}
	for i := range logins {
		l := &logins[i]
		l.Login, l.EndSessions = true, false
		if l.Name == p.user {
			// Sessions it still has are from its previous password.
			l.Password, l.KeepPassword, l.EndSessions = pw, false, true
		} else {
			l.Password, l.KeepPassword = "", true
		}
	}
	return logins, p, nil
}

// finishRotation moves the role's Secret to the rotated login, and says
// so in an Event.
func (r *Reconciler) finishRotation(ctx context.Context, db *v1alpha1.Database, obs *observation, p *pendingRotation) error {
	s := &corev1.Secret{}
	name := db.RoleSecretName(p.role)
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); err != nil {
		return fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	base := s.DeepCopy()
	now := obs.now.UTC().Truncate(time.Second)
	s.Data = roleSecretData(db, p.role, p.user, p.password, s.Data[v1alpha1.CredentialsCA])
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	ends := now.Add(p.grace)
	s.Annotations[annRotatedAt] = now.Format(time.RFC3339)
	s.Annotations[annPreviousUser] = p.previous
	s.Annotations[annGraceEnds] = ends.Format(time.RFC3339)
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to update Secret %s: %w", name, err)
	}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "PasswordRotated", "Rotate",
		"Rotated role %s's password: Secret %s now logs in as %s; %s's password works until %s", p.role, name, p.user, p.previous, ends.Format(time.RFC3339))
	return nil
}

// rotationStatus fills a role's status with its last and next rotation.
func rotationStatus(st *v1alpha1.RoleStatus, rs rotation, next time.Time) {
	if !rs.rotatedAt.IsZero() {
		st.LastRotationTime = ptr.To(metav1.NewTime(rs.rotatedAt))
	}
	if !next.IsZero() {
		st.NextRotationTime = ptr.To(metav1.NewTime(next))
	}
}
