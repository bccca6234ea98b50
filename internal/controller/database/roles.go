package database

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// reconcileRoles makes spec.roles on the primary: each login role's
// Secret first (its password generated once, or taken from the user's
// Secret), then one call to the primary's instance manager, which makes
// the roles and puts back what drifted. It runs at every reconcile, so a
// change by hand is put back within InstanceRefresh. A primary that cannot
// be asked leaves the roles Pending; it never fails the reconcile. It
// answers when a rotation is next due or a grace period ends.
func (r *Reconciler) reconcileRoles(ctx context.Context, db *v1alpha1.Database, obs *observation) (time.Time, error) {
	if len(db.Spec.Roles) == 0 {
		return time.Time{}, nil
	}
	prev := map[string]v1alpha1.RoleStatus{}
	if obs.Written != nil {
		for _, s := range obs.Written.Status.Roles {
			prev[s.Name] = s
		}
	}
	statuses := make([]v1alpha1.RoleStatus, len(db.Spec.Roles))
	var asked []instanceapi.DeclaredRole
	var asks []roleAsk
	var wake time.Time
	for i, role := range db.Spec.Roles {
		st := &statuses[i]
		st.Name, st.State, st.AppliedFor = role.Name, v1alpha1.RolePending, prev[role.Name].AppliedFor
		if problem := roleProblem(db, i, role); problem != "" {
			st.State, st.Message = v1alpha1.RoleFailed, problem
			continue
		}
		a := roleAsk{i: i, from: len(asked)}
		var logins []instanceapi.DeclaredRole
		if !role.Login || role.Ensure == v1alpha1.RoleEnsureAbsent {
			// No login: no Secret, no password that works, and no twin
			// left from a rotation. The Secret, which says there is a
			// twin, goes once the twin is dropped (and an Absent role's
			// once it is).
			logins = []instanceapi.DeclaredRole{apiRole(role, "")}
			twinned, err := r.rotatedBefore(ctx, db, role.Name)
			if err != nil {
				return wake, err
			}
			a.dropSecret = twinned || role.Ensure == v1alpha1.RoleEnsureAbsent
			if twinned {
				logins = append([]instanceapi.DeclaredRole{{Name: v1alpha1.RotationTwin(role.Name), Absent: true}}, logins...)
			}
			if !a.dropSecret {
				if err := r.deleteRoleSecret(ctx, db, role.Name); err != nil {
					return wake, err
				}
			}
		} else {
			secret, pw, problem, err := r.ensureRoleSecret(ctx, db, obs, i, role)
			if err != nil {
				return wake, err
			}
			if problem != "" {
				st.State, st.Message = v1alpha1.RoleFailed, problem
				continue
			}
			st.SecretName, a.secretVersion = secret.Name, secret.ResourceVersion
			rs := rotationOf(secret, role.Name)
			if role.PasswordSecret != nil {
				// The user's password is the role's own: its twin, if a
				// rotation made one, no longer logs in.
				rs.user = role.Name
			}
			logins = rs.logins(role, pw, obs.now)
			due, next, problem := rotationDue(db, i, role, rs, secret.CreationTimestamp.Time, obs.now)
			rotationStatus(st, rs, next)
			wake = earlier(earlier(wake, next), rs.graceEnds)
			switch {
			case problem != "":
				st.Message = problem
			case due && obs.now.Before(rs.graceEnds):
				st.Message = fmt.Sprintf("a password rotation waits for the last one's grace period to end at %s", rs.graceEnds.Format(time.RFC3339))
			case due:
				if logins, a.rotate, err = startRotation(role, rs, logins); err != nil {
					return wake, err
				}
			}
		}
		asked = append(asked, logins...)
		a.to = len(asked)
		asks = append(asks, a)
	}
	obs.found.roles = statuses
	if len(asked) == 0 {
		return wake, nil
	}
	res, err := r.askRoles(ctx, db, obs, asked)
	if err != nil {
		for _, a := range asks {
			statuses[a.i].Message = controller.Truncate(err.Error(), roleMessageMax)
		}
		return wake, nil
	}
	for _, a := range asks {
		role := db.Spec.Roles[a.i]
		st, got := &statuses[a.i], a.outcome(role.Name, res.Roles)
		appliedFor := roleVersion(role, a.secretVersion, asked[a.from:a.to])
		switch {
		case got.Error != "":
			st.State, st.Message = v1alpha1.RoleFailed, controller.Truncate(got.Error, roleMessageMax)
			continue
		case a.dropSecret:
			st.State = v1alpha1.RoleApplied
			if role.Ensure == v1alpha1.RoleEnsureAbsent {
				st.State = v1alpha1.RoleDropped
			}
			// Only once it is gone: a role whose drop is refused keeps
			// its Secret, in case it is declared again.
			if err := r.deleteRoleSecret(ctx, db, role.Name); err != nil {
				return wake, err
			}
		case a.rotate != nil:
			st.State = v1alpha1.RoleApplied
			if err := r.finishRotation(ctx, db, obs, a.rotate); err != nil {
				return wake, err
			}
			st.LastRotationTime = ptr.To(metav1.NewTime(obs.now.UTC().Truncate(time.Second)))
			wake = earlier(wake, obs.now.Add(a.rotate.grace))
		default:
			st.State = v1alpha1.RoleApplied
		}
		// A change made while the role and its Secret are as they were
		// when last applied was made by hand: drift, put back.
		if drift := putBack(got.Changed); len(drift) > 0 && st.AppliedFor == appliedFor {
			st.Message = controller.Truncate("put back what changed by hand: "+strings.Join(drift, ", "), roleMessageMax)
			controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "RoleDrift", "PutBack",
				"Role %s had drifted from spec.roles (%s); put back", role.Name, strings.Join(drift, ", "))
		}
		st.AppliedFor = appliedFor
	}
	return wake, nil
}

// roleAsk is what one declared role asked of the primary: asked[from:to]
// (the role, and its twin once rotated), the Secret's version, a rotation
// to record once applied, and a Secret to delete once applied.
type roleAsk struct {
	i             int
	from, to      int
	secretVersion string
	rotate        *pendingRotation
	dropSecret    bool
}

// outcome folds the answers for a's logins into one for role: the first
// error, and every change (the twin's named).
func (a roleAsk) outcome(role string, results []instanceapi.RoleResult) instanceapi.RoleResult {
	out := instanceapi.RoleResult{Name: role}
	for _, got := range results[a.from:a.to] {
		twin := got.Name != role
		for _, c := range got.Changed {
			if twin {
				c = got.Name + " " + c
			}
			out.Changed = append(out.Changed, c)
		}
		switch {
		case got.Error == "" || out.Error != "":
		case twin:
			out.Error = "login " + got.Name + ": " + got.Error
		default:
			out.Error = got.Error
		}
	}
	return out
}

// earlier is the earlier of two times, zero being none.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// roleMessageMax bounds a role's status message (PostgreSQL's detail on
// a refused drop lists every object).
const roleMessageMax = 1000 // and "...": within the API's 1024

// roleProblem says why spec.roles[i] cannot be applied as declared, or
// "": what the webhook refuses, for an API server that runs without it.
func roleProblem(db *v1alpha1.Database, i int, role v1alpha1.DatabaseRole) string {
	if why := db.ReservedRole(role.Name); why != "" {
		return fmt.Sprintf("spec.roles[%d].name: %s %s", i, role.Name, why)
	}
	for _, g := range role.InRoles {
		if why := v1alpha1.MembershipProblem(db, role.Name, g); why != "" {
			return fmt.Sprintf("spec.roles[%d].inRoles: %s %s", i, g, why)
		}
	}
	return ""
}

// roleVersion is what a role is applied for: its spec, its Secret's
// resourceVersion (which moves with its password) and its logins as asked
// (which a grace period's end changes), without passwords, hashed short.
func roleVersion(role v1alpha1.DatabaseRole, secretVersion string, logins []instanceapi.DeclaredRole) string {
	blank := slices.Clone(logins)
	for i := range blank {
		blank[i].Password = ""
	}
	//nolint:errchkjson // what the API server decoded marshals; a failure only makes the next change look applied
	spec, _ := json.Marshal(struct {
		Role          v1alpha1.DatabaseRole
		Logins        []instanceapi.DeclaredRole
		SecretVersion string
	}{role, blank, secretVersion})
	sum := sha256.Sum256(spec)
	return hex.EncodeToString(sum[:8])
}

// putBack is what a role's result changed besides making or dropping it.
func putBack(changed []string) []string {
	if slices.Contains(changed, "created") || slices.Contains(changed, "dropped") {
		return nil
	}
	return changed
}

// apiRole is role as the instance manager applies it.
func apiRole(role v1alpha1.DatabaseRole, password string) instanceapi.DeclaredRole {
	if role.Ensure == v1alpha1.RoleEnsureAbsent {
		return instanceapi.DeclaredRole{Name: role.Name, Absent: true}
	}
	out := instanceapi.DeclaredRole{Name: role.Name, Login: role.Login, CreateDB: role.CreateDB, Inherit: ptr.Deref(role.Inherit, true),
		ConnectionLimit: ptr.Deref(role.ConnectionLimit, -1), InRoles: role.InRoles, Password: password}
	if role.ValidUntil != nil {
		out.ValidUntil = ptr.To(role.ValidUntil.UTC())
	}
	return out
}

// askRoles sends the roles to the primary's instance manager.
func (r *Reconciler) askRoles(ctx context.Context, db *v1alpha1.Database, obs *observation, roles []instanceapi.DeclaredRole) (instanceapi.RolesResult, error) {
	t, token, err := r.primaryTarget(ctx, db, obs)
	if err != nil {
		return instanceapi.RolesResult{}, err
	}
	res, err := r.Instances.Roles(ctx, t, token, roles)
	if err != nil {
		return res, fmt.Errorf("the primary %s did not apply the roles: %w", obs.Primary, err)
	}
	return res, nil
}

// primaryTarget is the running primary's instance API, and the token a
// call that changes it needs.
func (r *Reconciler) primaryTarget(ctx context.Context, db *v1alpha1.Database, obs *observation) (instanceapi.Target, string, error) {
	if s, ok := obs.Instances[obs.Primary]; !ok || s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning {
		return instanceapi.Target{}, "", errors.New("waiting for a running primary")
	}
	t, err := r.targetOf(ctx, db, obs, obs.Primary)
	if err != nil {
		return t, "", err
	}
	token, err := r.apiToken(ctx, db)
	return t, token, err
}

// ensureRoleSecret makes or updates the login role's Secret, shaped like
// the credentials Secret, and returns it and the password it holds. The
// password is generated once (and at each rotation), or is the user's
// Secret's (spec.roles[].passwordSecret), followed when it changes.
// problem says what keeps the role from being applied (a missing or
// foreign Secret).
func (r *Reconciler) ensureRoleSecret(ctx context.Context, db *v1alpha1.Database, obs *observation, i int,
	role v1alpha1.DatabaseRole) (secret *corev1.Secret, password, problem string, err error) {
	name := db.RoleSecretName(role.Name)
	want := ""
	if ref := role.PasswordSecret; ref != nil {
		user := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: ref.Name}, user); {
		case apierrors.IsNotFound(err):
			return nil, "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s does not exist", i, ref.Name), nil
		case err != nil:
			return nil, "", "", fmt.Errorf("failed to get Secret %s: %w", ref.Name, err)
		}
		want = string(user.Data[v1alpha1.CredentialsPassword])
		if want == "" {
			return nil, "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s has no %q key", i, ref.Name, v1alpha1.CredentialsPassword), nil
		}
		if !printableASCII(want) {
			// The server and libpq normalise other passwords (SASLprep);
			// the verifier daytwo makes does not.
			return nil, "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s's password must be printable ASCII, without spaces at either end or a newline", i, ref.Name), nil
		}
		if u, ok := user.Data[v1alpha1.CredentialsUser]; ok && string(u) != role.Name {
			return nil, "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s is for user %q, not %s", i, ref.Name, u, role.Name), nil
		}
	}
	s := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); {
	case apierrors.IsNotFound(err):
		if want == "" {
			if want, err = postgres.Password(); err != nil {
				return nil, "", "", err
			}
		}
		ca, err := r.servedCA(ctx, db, obs)
		if err != nil {
			return nil, "", "", err
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels(db),
			Annotations: map[string]string{annCA: obs.found.tls.ca}}, Type: corev1.SecretTypeOpaque, Data: roleSecretData(db, role.Name, role.Name, want, ca)}
		if err := controllerutil.SetControllerReference(db, s, r.Client.Scheme()); err != nil {
			return nil, "", "", err
		}
		if err := r.Client.Create(ctx, s); err != nil {
			return nil, "", "", fmt.Errorf("failed to create Secret %s: %w", name, err)
		}
		return s, want, "", nil
	case err != nil:
		return nil, "", "", fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(s, db) {
		return nil, "", fmt.Sprintf("Secret %s exists and does not belong to this Database", name), nil
	}
	have := string(s.Data[v1alpha1.CredentialsPassword])
	if want == "" {
		want = have
	}
	if want == "" {
		// A generated password removed by hand: a new one.
		if want, err = postgres.Password(); err != nil {
			return nil, "", "", err
		}
	}
	ca := s.Data[v1alpha1.CredentialsCA]
	if s.Annotations[annCA] != obs.found.tls.ca {
		if ca, err = r.servedCA(ctx, db, obs); err != nil {
			return nil, "", "", err
		}
	}
	rs := rotationOf(s, role.Name)
	user := rs.user
	if role.PasswordSecret != nil {
		user = role.Name
	}
	data := roleSecretData(db, role.Name, user, want, ca)
	if maps.EqualFunc(s.Data, data, bytes.Equal) && s.Annotations[annCA] == obs.found.tls.ca {
		return s, want, "", nil
	}
	base := s.DeepCopy()
	s.Data = data
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if user != rs.user {
		// A rotated role moved to a password of the user's own: the twin
		// the Secret held keeps working for a grace period, as after a
		// rotation, while clients move to the role.
		s.Annotations[annPreviousUser] = rs.user
		s.Annotations[annGraceEnds] = obs.now.Add(v1alpha1.DefaultRotationGrace).UTC().Format(time.RFC3339)
	}
	s.Annotations[annCA] = obs.found.tls.ca
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, "", "", fmt.Errorf("failed to update Secret %s: %w", name, err)
	}
	return s, want, "", nil
}

// printableASCII: every byte a printable ASCII character, none a space at
// either end.
func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return strings.TrimSpace(s) == s
}

// servedCA is the CA of the certificate the instances serve, read once a
// reconcile.
func (r *Reconciler) servedCA(ctx context.Context, db *v1alpha1.Database, obs *observation) ([]byte, error) {
	if obs.found.servedCA != nil || obs.found.tls.secret == "" {
		return obs.found.servedCA, nil
	}
	served := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: obs.found.tls.secret}, served); err != nil {
		return nil, fmt.Errorf("failed to get Secret %s: %w", obs.found.tls.secret, err)
	}
	obs.found.servedCA = served.Data[pki.CACert]
	return obs.found.servedCA, nil
}

// roleSecretData is a login role's Secret: the credentials Secret's keys,
// for user (role, or its rotation twin), in the first database of
// spec.databases role owns (else the application database).
func roleSecretData(db *v1alpha1.Database, role, user, password string, ca []byte) map[string][]byte {
	d := credentialsData(db, password)
	d[v1alpha1.CredentialsUser] = []byte(user)
	d[v1alpha1.CredentialsDatabase] = []byte(db.RoleDatabase(role))
	d[v1alpha1.CredentialsURI] = []byte(connectionURI(user, password, string(d[v1alpha1.CredentialsHost]),
		string(d[v1alpha1.CredentialsPort]), string(d[v1alpha1.CredentialsDatabase])))
	if len(ca) > 0 {
		d[v1alpha1.CredentialsCA] = ca
	}
	setPoolerKeys(db, d)
	return d
}

// rotatedBefore says whether role's Secret, if this Database's, records a
// rotation: the role has a twin login.
func (r *Reconciler) rotatedBefore(ctx context.Context, db *v1alpha1.Database, role string) (bool, error) {
	s := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, db.RoleSecretName(role))
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return metav1.IsControlledBy(s, db) && s.Annotations[annRotatedAt] != "", nil
}

// deleteRoleSecret deletes a dropped role's Secret, if this Database's.
func (r *Reconciler) deleteRoleSecret(ctx context.Context, db *v1alpha1.Database, role string) error {
	s := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, db.RoleSecretName(role))
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(s, db) {
		return nil
	}
	if err := r.Client.Delete(ctx, s, client.Preconditions{UID: ptr.To(s.UID)}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete Secret %s: %w", s.Name, err)
	}
	return nil
}

// rolesRetry is how soon roles that wait for the primary are tried again.
const rolesRetry = 10 * time.Second

// rolesPhase applies spec.roles; roles that wait for the primary come
// back sooner than the instances' refresh (a failed one, which waits for
// a person, does not).
func (r *Reconciler) rolesPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	wake, err := r.reconcileRoles(ctx, db, obs)
	if err != nil {
		return stepResult{}, err
	}
	var res stepResult
	if !wake.IsZero() {
		res.requeue = max(wake.Sub(obs.now), time.Second)
	}
	for _, s := range obs.found.roles {
		if s.State == v1alpha1.RolePending {
			res.requeue = controller.Soonest(res.requeue, rolesRetry)
		}
	}
	return res, nil
}
