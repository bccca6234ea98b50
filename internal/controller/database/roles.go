package database

import (
	"bytes"
	"context"
	"fmt"
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
	statuses := make([]v1alpha1.RoleStatus, len(db.Spec.Roles))
	var asked []instanceapi.DeclaredRole
	var askedAt []int
	// What a reconcile changes after the spec did, or after a Secret's
	// password did, is applied; anything else it changes had drifted.
	specChanged := obs.Written == nil || obs.Written.Status.ObservedGeneration != db.Generation
	rotated := map[string]bool{}
	for i, role := range db.Spec.Roles {
		st := &statuses[i]
		st.Name, st.State = role.Name, v1alpha1.RolePending
		if why := db.ReservedRole(role.Name); why != "" {
			st.State, st.Message = v1alpha1.RoleFailed, fmt.Sprintf("spec.roles[%d].name: %s %s", i, role.Name, why)
			continue
		}
		if role.Ensure == v1alpha1.RoleEnsureAbsent {
			if err := r.deleteRoleSecret(ctx, db, role.Name); err != nil {
				return err
			}
			asked, askedAt = append(asked, instanceapi.DeclaredRole{Name: role.Name, Absent: true}), append(askedAt, i)
			continue
		}
		password := ""
		if role.Login {
			pw, changed, problem, err := r.ensureRoleSecret(ctx, db, obs, i, role)
			if err != nil {
				return err
			}
			rotated[role.Name] = changed
			if problem != "" {
				st.State, st.Message = v1alpha1.RoleFailed, problem
				continue
			}
			password, st.SecretName = pw, db.RoleSecretName(role.Name)
		}
		asked, askedAt = append(asked, apiRole(role, password)), append(askedAt, i)
	}
	obs.found.roles = statuses
	if len(asked) == 0 {
		return nil
	}
	res, err := r.askRoles(ctx, db, obs, asked)
	if err != nil {
		for _, i := range askedAt {
			statuses[i].Message = err.Error()
		}
		return nil
	}
	for k, i := range askedAt {
		st, got := &statuses[i], res.Roles[k]
		switch {
		case got.Error != "":
			st.State, st.Message = v1alpha1.RoleFailed, got.Error
		case asked[k].Absent:
			st.State = v1alpha1.RoleDropped
		default:
			st.State = v1alpha1.RoleApplied
		}
		if drift := putBack(got.Changed, rotated[got.Name]); len(drift) > 0 && got.Error == "" && !specChanged {
			st.Message = "put back what changed by hand: " + strings.Join(drift, ", ")
			controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, "RoleDrift", "PutBack",
				"Role %s had drifted from spec.roles (%s); put back", got.Name, strings.Join(drift, ", "))
		}
	}
	return nil
}

// putBack is what a role's result changed besides making or dropping it,
// and besides a password its Secret just changed: drift put back.
func putBack(changed []string, rotated bool) []string {
	if slices.Contains(changed, "created") || slices.Contains(changed, "dropped") {
		return nil
	}
	if rotated {
		changed = slices.DeleteFunc(slices.Clone(changed), func(c string) bool { return c == "password" })
	}
	return changed
}

// apiRole is role as the instance manager applies it.
func apiRole(role v1alpha1.DatabaseRole, password string) instanceapi.DeclaredRole {
	out := instanceapi.DeclaredRole{Name: role.Name, Login: role.Login, CreateDB: role.CreateDB, Inherit: ptr.Deref(role.Inherit, true),
		ConnectionLimit: ptr.Deref(role.ConnectionLimit, -1), InRoles: role.InRoles, Password: password}
	if role.ValidUntil != nil {
		out.ValidUntil = ptr.To(role.ValidUntil.UTC())
	}
	return out
}

// askRoles sends the roles to the primary's instance manager.
func (r *Reconciler) askRoles(ctx context.Context, db *v1alpha1.Database, obs *observation, roles []instanceapi.DeclaredRole) (instanceapi.RolesResult, error) {
	if s, ok := obs.Instances[obs.Primary]; !ok || s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning {
		return instanceapi.RolesResult{}, fmt.Errorf("waiting for a running primary")
	}
	t, err := r.targetOf(ctx, db, obs, obs.Primary)
	if err != nil {
		return instanceapi.RolesResult{}, err
	}
	token, err := r.apiToken(ctx, db)
	if err != nil {
		return instanceapi.RolesResult{}, err
	}
	res, err := r.Instances.Roles(ctx, t, token, roles)
	if err != nil {
		return res, fmt.Errorf("the primary %s did not apply the roles: %w", obs.Primary, err)
	}
	return res, nil
}

// ensureRoleSecret makes or updates the login role's Secret, shaped like
// the credentials Secret, and returns the role's password, and whether it
// changed. The password is generated once, or is the user's Secret's
// (spec.roles[].passwordSecret), followed when it changes. problem says
// what keeps the role from being applied (a missing or foreign Secret).
func (r *Reconciler) ensureRoleSecret(ctx context.Context, db *v1alpha1.Database, obs *observation, i int,
	role v1alpha1.DatabaseRole) (password string, changed bool, problem string, err error) {
	name := db.RoleSecretName(role.Name)
	want := ""
	if ref := role.PasswordSecret; ref != nil {
		user := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: ref.Name}, user); {
		case apierrors.IsNotFound(err):
			return "", false, fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s does not exist", i, ref.Name), nil
		case err != nil:
			return "", false, "", fmt.Errorf("failed to get Secret %s: %w", ref.Name, err)
		}
		want = string(user.Data[v1alpha1.CredentialsPassword])
		if want == "" {
			return "", false, fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s has no %q key", i, ref.Name, v1alpha1.CredentialsPassword), nil
		}
		if u, ok := user.Data[v1alpha1.CredentialsUser]; ok && string(u) != role.Name {
			return "", false, fmt.Sprintf("spec.roles[%d].passwordSecret: Secret %s is for user %q, not %s", i, ref.Name, u, role.Name), nil
		}
	}
	s := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s); {
	case apierrors.IsNotFound(err):
		if want == "" {
			if want, err = postgres.Password(); err != nil {
				return "", false, "", err
			}
		}
		ca, err := r.servedCA(ctx, db, obs)
		if err != nil {
			return "", false, "", err
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels(db),
			Annotations: map[string]string{annCA: obs.found.tls.ca}}, Type: corev1.SecretTypeOpaque, Data: roleSecretData(db, role.Name, want, ca)}
		if err := controllerutil.SetControllerReference(db, s, r.Client.Scheme()); err != nil {
			return "", false, "", err
		}
		if err := r.Client.Create(ctx, s); err != nil {
			return "", false, "", fmt.Errorf("failed to create Secret %s: %w", name, err)
		}
		return want, true, "", nil
	case err != nil:
		return "", false, "", fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(s, db) {
		return "", false, fmt.Sprintf("Secret %s exists and does not belong to this Database", name), nil
	}
	have := string(s.Data[v1alpha1.CredentialsPassword])
	if want == "" {
		want = have
	}
	if want == "" {
		// A generated password removed by hand: a new one.
		if want, err = postgres.Password(); err != nil {
			return "", false, "", err
		}
	}
	ca := s.Data[v1alpha1.CredentialsCA]
	if s.Annotations[annCA] != obs.found.tls.ca {
		if ca, err = r.servedCA(ctx, db, obs); err != nil {
			return "", false, "", err
		}
	}
	data := roleSecretData(db, role.Name, want, ca)
	if sameData(s.Data, data) && s.Annotations[annCA] == obs.found.tls.ca {
		return want, false, "", nil
	}
	base := s.DeepCopy()
	s.Data = data
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[annCA] = obs.found.tls.ca
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return "", false, "", fmt.Errorf("failed to update Secret %s: %w", name, err)
	}
	return want, want != have, "", nil
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
// for role.
func roleSecretData(db *v1alpha1.Database, role, password string, ca []byte) map[string][]byte {
	d := credentialsData(db, password)
	d[v1alpha1.CredentialsUser] = []byte(role)
	d[v1alpha1.CredentialsURI] = []byte(connectionURI(role, password, string(d[v1alpha1.CredentialsHost]),
		string(d[v1alpha1.CredentialsPort]), string(d[v1alpha1.CredentialsDatabase])))
	if len(ca) > 0 {
		d[v1alpha1.CredentialsCA] = ca
	}
	return d
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
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

// rolesRetry is how soon roles that wait for the primary, or failed, are tried again.
const rolesRetry = 10 * time.Second

// rolesPhase applies spec.roles; roles not applied yet come back sooner
// than the instances' refresh.
func (r *Reconciler) rolesPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	if err := r.reconcileRoles(ctx, db, obs); err != nil {
		return stepResult{}, err
	}
	for _, s := range obs.found.roles {
		if s.State == v1alpha1.RolePending || s.State == v1alpha1.RoleFailed {
			return stepResult{requeue: rolesRetry}, nil
		}
	}
	return stepResult{}, nil
}
