package database_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// spec.roles in the API server: each login role gets a Secret shaped like
// the credentials Secret (its password generated, or the user's Secret's,
// followed when it changes), a role without login none (a role that loses
// login loses its Secret), a password the verifier cannot carry is
// refused with the field named, and until a primary answers the roles are
// Pending; an Absent role keeps its Secret until the primary dropped it.
// The roles themselves are made by the instance manager
// (internal/instance, TestDeclaredRolesAreMadeKeptAndDropped).
func TestDeclaredRolesGetSecretsAndStatus(t *testing.T) {
	ns := env.Namespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bi-password", Namespace: ns},
		StringData: map[string]string{"username": "bi", "password": "bi-pass-1"}})
	create(t, newDB(ns, "orders", func(db *v1alpha1.Database) {
		db.Spec.Roles = []v1alpha1.DatabaseRole{
			{Name: "api", Login: true},
			{Name: "bi", Login: true, PasswordSecret: &v1alpha1.SecretReference{Name: "bi-password"}, InRoles: []string{"pg_read_all_data"}},
			{Name: "readers"},
		}
	}))
	db := waitCondition(t, ns, "orders", v1alpha1.ConditionRolesReconciled, metav1.ConditionFalse, v1alpha1.ReasonRolesPending)
	if len(db.Status.Roles) != 3 || db.Status.Roles[0].State != v1alpha1.RolePending || db.Status.Roles[0].SecretName != "orders-role-api" ||
		db.Status.Roles[2].SecretName != "" {
		t.Fatalf("status.roles = %+v, want three Pending roles, api's Secret orders-role-api, none for readers", db.Status.Roles)
	}

	var api *corev1.Secret
	eventually(t, "api's Secret with the CA", func() (bool, error) {
		s, err := get(ns, "orders-role-api", &corev1.Secret{})
		api = s
		return err == nil && len(s.Data[v1alpha1.CredentialsCA]) > 0, ignoreNotFound(err)
	})
	pw := string(api.Data["password"])
	if len(pw) < 32 || string(api.Data["username"]) != "api" || string(api.Data["dbname"]) != "app" || string(api.Data["port"]) != "5432" ||
		string(api.Data["host"]) == "" || !strings.Contains(string(api.Data["uri"]), "sslmode=verify-full") ||
		!strings.HasPrefix(string(api.Data["uri"]), "postgresql://api:") || len(api.OwnerReferences) != 1 {
		t.Fatalf("api's Secret has the wrong shape: %v, owners %v", secretKeys(api.Data), api.OwnerReferences)
	}
	bi, err := get(ns, "orders-role-bi", &corev1.Secret{})
	if err != nil || string(bi.Data["password"]) != "bi-pass-1" {
		t.Fatalf("bi's Secret does not carry the user's password: %v", err)
	}
	if _, err := get(ns, "orders-role-readers", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a role without login got a Secret: %v", err)
	}

	// The user's password changes: bi's Secret follows; api's stays.
	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bi-password", Namespace: ns}}, func(s *corev1.Secret) {
		s.Data["password"] = []byte("bi-pass-2")
	})
	eventually(t, "bi's Secret following the user's", func() (bool, error) {
		s, err := get(ns, "orders-role-bi", &corev1.Secret{})
		return err == nil && string(s.Data["password"]) == "bi-pass-2" && strings.Contains(string(s.Data["uri"]), "bi-pass-2"), ignoreNotFound(err)
	})
	if s, _ := get(ns, "orders-role-api", &corev1.Secret{}); string(s.Data["password"]) != pw {
		t.Fatal("the generated password changed")
	}

	// A password with a newline (kubectl create secret --from-file) is
	// refused, with the field.
	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bi-password", Namespace: ns}}, func(s *corev1.Secret) {
		s.Data["password"] = []byte("bi-pass-3\n")
	})
	db = waitCondition(t, ns, "orders", v1alpha1.ConditionRolesReconciled, metav1.ConditionFalse, v1alpha1.ReasonRoleFailed)
	if msg := condition(db, v1alpha1.ConditionRolesReconciled).Message; !strings.Contains(msg, "spec.roles[1].passwordSecret: Secret bi-password's password must be printable ASCII") {
		t.Fatalf("RolesReconciled says %q", msg)
	}

	// bi loses login: its Secret goes. api is declared Absent: with no
	// primary to drop it, it stays Pending and keeps its Secret.
	update(t, db, func(db *v1alpha1.Database) {
		db.Spec.Roles[1] = v1alpha1.DatabaseRole{Name: "bi"}
		db.Spec.Roles[0].Ensure = v1alpha1.RoleEnsureAbsent
	})
	eventually(t, "bi's Secret deleted", func() (bool, error) {
		_, err := get(ns, "orders-role-bi", &corev1.Secret{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	waitCondition(t, ns, "orders", v1alpha1.ConditionRolesReconciled, metav1.ConditionFalse, v1alpha1.ReasonRolesPending)
	if _, err := get(ns, "orders-role-api", &corev1.Secret{}); err != nil {
		t.Fatalf("api's Secret went before its role was dropped: %v", err)
	}
}

// spec.databases in the API server: Pending until a primary answers, and
// a login role that owns one gets a Secret that names the application
// database until it exists (status.databases says Applied).
func TestDeclaredDatabasesStatusAndRoleSecret(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "orders", func(db *v1alpha1.Database) {
		db.Spec.Roles = []v1alpha1.DatabaseRole{{Name: "inventory_api", Login: true}}
		db.Spec.Databases = []v1alpha1.LogicalDatabase{
			{Name: "inventory", Owner: "inventory_api", Extensions: []v1alpha1.DatabaseExtension{{Name: "vector"}}},
			{Name: "app", Schemas: []v1alpha1.DatabaseSchema{{Name: "reporting"}}},
		}
	}))
	db := waitCondition(t, ns, "orders", v1alpha1.ConditionDatabasesReconciled, metav1.ConditionFalse, v1alpha1.ReasonDatabasesPending)
	if len(db.Status.Databases) != 2 || db.Status.Databases[0].State != v1alpha1.RolePending {
		t.Fatalf("status.databases = %+v, want two Pending", db.Status.Databases)
	}
	eventually(t, "inventory_api's Secret naming the application database", func() (bool, error) {
		s, err := get(ns, "orders-role-inventory-api", &corev1.Secret{})
		return err == nil && string(s.Data["dbname"]) == "app" && strings.HasSuffix(strings.Split(string(s.Data["uri"]), "?")[0], "/app"), ignoreNotFound(err)
	})
	if got := db.RoleDatabase("inventory_api"); got != "app" {
		t.Fatalf("before inventory is applied the role's database is %s", got)
	}
	db.Status.Databases[0].State = v1alpha1.RoleApplied
	if got := db.RoleDatabase("inventory_api"); got != "inventory" {
		t.Fatalf("once inventory is applied the role's database is %s, want inventory", got)
	}
}

// Roles the API refuses, each with the field and the reason.
func TestDeclaredRolesRefused(t *testing.T) {
	ns := env.Namespace(t)
	for _, tc := range []struct {
		role v1alpha1.DatabaseRole
		dbs  []v1alpha1.LogicalDatabase
		want string
		more []v1alpha1.DatabaseRole
	}{
		{v1alpha1.DatabaseRole{Name: "root", Superuser: true}, nil, "superuser roles are refused", nil},
		{v1alpha1.DatabaseRole{Name: "admin", CreateRole: true}, nil, "createrole is refused", nil},
		{v1alpha1.DatabaseRole{Name: "postgres"}, nil, "spec.roles[0].name: Invalid value: \"postgres\": is a role daytwo runs the server with", nil},
		{v1alpha1.DatabaseRole{Name: "app"}, nil, "is the application owner", nil},
		{v1alpha1.DatabaseRole{Name: "pg_x"}, nil, "is PostgreSQL's prefix", nil},
		{v1alpha1.DatabaseRole{Name: "Mixed"}, nil, "spec.roles[0].name", nil},
		{v1alpha1.DatabaseRole{Name: "loop", InRoles: []string{"loop"}}, nil, "spec.roles[0].inRoles: Invalid value: \"loop\": a role cannot be a member of itself", nil},
		{v1alpha1.DatabaseRole{Name: "nologin", PasswordSecret: &v1alpha1.SecretReference{Name: "s"}}, nil, "passwordSecret needs login: true", nil},
		{v1alpha1.DatabaseRole{Name: "app_"}, nil, "spec.roles[0].name", nil},
		{v1alpha1.DatabaseRole{Name: "escalate", InRoles: []string{"postgres"}}, nil, "spec.roles[0].inRoles: Invalid value: \"postgres\": is a role daytwo runs the server with", nil},
		{v1alpha1.DatabaseRole{Name: "files", InRoles: []string{"pg_read_server_files"}}, nil, "reaches the server's programs or files", nil},
		{v1alpha1.DatabaseRole{Name: "ok"}, []v1alpha1.LogicalDatabase{{Name: "template1"}}, "spec.databases[0].name: template1 is a database PostgreSQL keeps for itself", nil},
		{v1alpha1.DatabaseRole{Name: "ok"}, []v1alpha1.LogicalDatabase{{Name: "inv", Owner: "nobody"}}, "spec.databases[0].owner: nobody is neither the application owner nor a role of spec.roles", nil},
		{v1alpha1.DatabaseRole{Name: "ok"}, []v1alpha1.LogicalDatabase{{Name: "app", Owner: "ok"}}, "spec.databases[0].owner: app is the application database", nil},
		{v1alpha1.DatabaseRole{Name: "ok"}, []v1alpha1.LogicalDatabase{{Name: "inv", Schemas: []v1alpha1.DatabaseSchema{{Name: "pg_mine"}}}}, "spec.databases[0].schemas[0].name: pg_mine is PostgreSQL's own", nil},
		{v1alpha1.DatabaseRole{Name: "ok"}, []v1alpha1.LogicalDatabase{{Name: "inv", Extensions: []v1alpha1.DatabaseExtension{{Name: "x", Version: "1'2"}}}}, "spec.databases[0].extensions[0].version", nil},
		{v1alpha1.DatabaseRole{Name: "r", PasswordRotation: &v1alpha1.PasswordRotation{}}, nil, "passwordRotation needs login: true", nil},
		{v1alpha1.DatabaseRole{Name: "r", Login: true, PasswordRotation: &v1alpha1.PasswordRotation{}, PasswordSecret: &v1alpha1.SecretReference{Name: "s"}}, nil,
			"passwordRotation rotates a password daytwo generates", nil},
		{v1alpha1.DatabaseRole{Name: "r", Login: true, PasswordRotation: &v1alpha1.PasswordRotation{Schedule: "every day"}}, nil,
			"spec.roles[0].passwordRotation.schedule: Invalid value: \"every day\"", nil},
		{v1alpha1.DatabaseRole{Name: "r", Login: true, PasswordRotation: &v1alpha1.PasswordRotation{GracePeriod: &metav1.Duration{Duration: 30 * time.Second}}}, nil,
			"gracePeriod must be at least 1m", nil},
		{v1alpha1.DatabaseRole{Name: "api", Login: true}, nil, "spec.roles[1].name: Invalid value: \"api_alt\": is the twin login role", []v1alpha1.DatabaseRole{{Name: "api_alt"}}},
	} {
		db := newDB(ns, "refused", func(db *v1alpha1.Database) {
			db.Spec.Roles, db.Spec.Databases = append([]v1alpha1.DatabaseRole{tc.role}, tc.more...), tc.dbs
		})
		err := env.Client.Create(ctx, db)
		if err == nil {
			_ = env.Client.Delete(ctx, db)
			t.Errorf("role %+v was accepted", tc.role)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("role %s: %v, want it to say %q", tc.role.Name, err, tc.want)
		}
	}
}

// ignoreNotFound is err unless it is NotFound (waited out).
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func secretKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
