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
// be asked leaves the roles Pending; it never fails the reconcile.
func (r *Reconciler) reconcileRoles(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	if len(db.Spec.Roles) == 0 {
		return nil
	}
	prev := map[string]v1alpha1.RoleStatus{}
	if obs.Written != nil {
		for _, s := range obs.Written.Status.Roles {
			prev[s.Name] = s
		}
	}
	statuses := make([]v1alpha1.RoleStatus, len(db.Spec.Roles))
	var asked []instanceapi.DeclaredRole
	var askedAt []int
	var appliedFor []string
	for i, role := range db.Spec.Roles {
		st := &statuses[i]
		st.Name, st.State, st.AppliedFor = role.Name, v1alpha1.RolePending, prev[role.Name].AppliedFor
		if problem := roleProblem(db, i, role); problem != "" {
			st.State, st.Message = v1alpha1.RoleFailed, problem
			continue
		}
		password, version := "", ""
		if role.Login && role.Ensure != v1alpha1.RoleEnsureAbsent {
			pw, rv, problem, err := r.ensureRoleSecret(ctx, db, obs, i, role)
			if err != nil {
				return err
			}
			if problem != "" {
				st.State, st.Message = v1alpha1.RoleFailed, problem
				continue
			}
			password, version, st.SecretName = pw, rv, db.RoleSecretName(role.Name)
		} else if role.Ensure != v1alpha1.RoleEnsureAbsent {
			// No login: no Secret, no password that works.
			if err := r.deleteRoleSecret(ctx, db, role.Name); err != nil {
				return err
			}
		}
		a := apiRole(role, password)
		asked, askedAt, appliedFor = append(asked, a), append(askedAt, i), append(appliedFor, roleVersion(role, version))
	}
	obs.found.roles = statuses
	if len(asked) == 0 {
		return nil
	}
	res, err := r.askRoles(ctx, db, obs, asked)
	if err != nil {
		for _, i := range askedAt {
			statuses[i].Message = controller.Truncate(err.Error(), roleMessageMax)
		}
		return nil
	}
	for k, i := range askedAt {
		st, got := &statuses[i], res.Roles[k]
		switch {
		case got.Error != "":
			st.State, st.Message = v1alpha1.RoleFailed, controller.Truncate(got.Error, roleMessageMax)
			continue
		case asked[k].Absent:
			st.State = v1alpha1.RoleDropped
			// Only once it is gone: a role whose drop is refused keeps
			// its Secret, in case it is declared again.
			if err := r.deleteRoleSecret(ctx, db, got.Name); err != nil {
				return err
			}
		default:
			st.State = v1alpha1.RoleApplied
		}
		// A change made while the role and its Secret are as they were
		// when last applied was made by hand: drift, put back.
		if drift := putBack(got.Changed); len(drift) > 0 && st.AppliedFor == appliedFor[k] {
			st.Message = controller.Truncate("put back what changed by hand: "+strings.Join(drift, ", "), roleMessageMax)
			controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "RoleDrift", "PutBack",
				"Role %s had drifted from spec.roles (%s); put back", got.Name, strings.Join(drift, ", "))
		}
		st.AppliedFor = appliedFor[k]
	}
	return nil
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

// roleVersion is what a role is applied for: its spec and its Secret's
// resourceVersion (which moves with its password), hashed short.
func roleVersion(role v1alpha1.DatabaseRole, secretVersion string) string {
	spec, _ := json.Marshal(role) //nolint:errchkjson // a spec the API server decoded marshals; a failure only makes the next change look applied
	sum := sha256.Sum256(append(spec, []byte("/"+secretVersion)...))
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
// the credentials Secret, and returns the role's password and the
// Secret's resourceVersion. The password is generated once, or is the user's Secret's
// (spec.roles[].passwordSecret), followed when it changes. problem says
// what keeps the role from being applied (a missing or foreign Secret).
func (r *Reconciler) ensureRoleSecret(ctx context.Context, db *v1alpha1.Database, obs *observation, i int,
	role v1alpha1.DatabaseRole) (password, version, problem string, err error) {
	name := db.RoleSecretName(role.Name)
	want := ""
	if ref := role.PasswordSecret; ref != nil {
		user := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: ref.Name}, user); {
		case apierrors.IsNotFound(err):
			return "", "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s does not exist", i, ref.Name), nil
		case err != nil:
			return "", "", "", fmt.Errorf("failed to get Secret %s: %w", ref.Name, err)
		}
		want = string(user.Data[v1alpha1.CredentialsPassword])
		if want == "" {
			return "", "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s has no %q key", i, ref.Name, v1alpha1.CredentialsPassword), nil
		}
		if !printableASCII(want) {
			// The server and libpq normalise other passwords (SASLprep);
			// the verifier daytwo makes does not.
			return "", "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s's password must be printable ASCII, without spaces at either end or a newline", i, ref.Name), nil
		}
		if u, ok := user.Data[v1alpha1.CredentialsUser]; ok && string(u) != role.Name {
			return "", "", fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s is for user %q, not %s", i, ref.Name, u, role.Name), nil
		}
	}
	s := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); {
	case apierrors.IsNotFound(err):
		if want == "" {
			if want, err = postgres.Password(); err != nil {
				return "", "", "", err
			}
		}
		ca, err := r.servedCA(ctx, db, obs)
		if err != nil {
			return "", "", "", err
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels(db),
			Annotations: map[string]string{annCA: obs.found.tls.ca}}, Type: corev1.SecretTypeOpaque, Data: roleSecretData(db, role.Name, want, ca)}
		if err := controllerutil.SetControllerReference(db, s, r.Client.Scheme()); err != nil {
			return "", "", "", err
		}
		if err := r.Client.Create(ctx, s); err != nil {
			return "", "", "", fmt.Errorf("failed to create Secret %s: %w", name, err)
		}
		return want, s.ResourceVersion, "", nil
	case err != nil:
		return "", "", "", fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(s, db) {
		return "", "", fmt.Sprintf("Secret %s exists and does not belong to this Database", name), nil
	}
	have := string(s.Data[v1alpha1.CredentialsPassword])
	if want == "" {
		want = have
	}
	if want == "" {
		// A generated password removed by hand: a new one.
		if want, err = postgres.Password(); err != nil {
			return "", "", "", err
		}
	}
	ca := s.Data[v1alpha1.CredentialsCA]
	if s.Annotations[annCA] != obs.found.tls.ca {
		if ca, err = r.servedCA(ctx, db, obs); err != nil {
			return "", "", "", err
		}
	}
	data := roleSecretData(db, role.Name, want, ca)
	if maps.EqualFunc(s.Data, data, bytes.Equal) && s.Annotations[annCA] == obs.found.tls.ca {
		return want, s.ResourceVersion, "", nil
	}
	base := s.DeepCopy()
	s.Data = data
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[annCA] = obs.found.tls.ca
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return "", "", "", fmt.Errorf("failed to update Secret %s: %w", name, err)
	}
	return want, s.ResourceVersion, "", nil
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
// for role, in the first database of spec.databases it owns (else the
// application database).
func roleSecretData(db *v1alpha1.Database, role, password string, ca []byte) map[string][]byte {
	d := credentialsData(db, password)
	d[v1alpha1.CredentialsUser] = []byte(role)
	d[v1alpha1.CredentialsDatabase] = []byte(db.RoleDatabase(role))
	d[v1alpha1.CredentialsURI] = []byte(connectionURI(role, password, string(d[v1alpha1.CredentialsHost]),
		string(d[v1alpha1.CredentialsPort]), string(d[v1alpha1.CredentialsDatabase])))
	if len(ca) > 0 {
		d[v1alpha1.CredentialsCA] = ca
	}
	return d
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
	if err := r.reconcileRoles(ctx, db, obs); err != nil {
		return stepResult{}, err
	}
	for _, s := range obs.found.roles {
		if s.State == v1alpha1.RolePending {
			return stepResult{requeue: rolesRetry}, nil
		}
	}
	return stepResult{}, nil
}
