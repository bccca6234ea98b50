package v1alpha1

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RoleEnsure says whether a declared role exists.
// +kubebuilder:validation:Enum=Present;Absent
type RoleEnsure string

const (
	// RoleEnsurePresent creates the role and keeps it as declared.
	RoleEnsurePresent RoleEnsure = "Present"
	// RoleEnsureAbsent drops the role. A role that still owns objects or
	// holds privileges is not dropped: its status says why, in
	// PostgreSQL's words, until the objects are reassigned or dropped.
	RoleEnsureAbsent RoleEnsure = "Absent"
)

// DatabaseRole is a PostgreSQL role daytwo keeps as declared: created,
// altered back when it drifts (an ALTER ROLE by hand), given the
// declared memberships and no others, and its password set from its
// Secret. A role removed from the list is left as it is; ensure Absent
// drops it.
// +kubebuilder:validation:XValidation:rule="!has(self.superuser) || !self.superuser",message="superuser roles are refused: a superuser can read the server's files and run programs as its user; grant pg_read_all_data, pg_write_all_data or pg_monitor instead"
// +kubebuilder:validation:XValidation:rule="!has(self.createrole) || !self.createrole",message="createrole is refused: such a role can create and alter other roles outside the Database's spec; declare every role here instead"
// +kubebuilder:validation:XValidation:rule="!has(self.passwordSecret) || (has(self.login) && self.login)",message="passwordSecret needs login: true (a role that cannot log in has no password)"
// +kubebuilder:validation:XValidation:rule="!has(self.passwordRotation) || (has(self.login) && self.login)",message="passwordRotation needs login: true (a role that cannot log in has no password)"
// +kubebuilder:validation:XValidation:rule="!has(self.passwordRotation) || !has(self.passwordSecret)",message="passwordRotation rotates a password daytwo generates; with passwordSecret, change your Secret's password instead"
// +kubebuilder:validation:XValidation:rule="!has(self.passwordRotation) || size(self.name) <= 59",message="a role with passwordRotation has a name of at most 59 characters (its twin login role adds _alt)"
type DatabaseRole struct {
	// name is the role's name: lower case letters, digits and
	// underscores, as PostgreSQL folds an unquoted name, ending with a
	// letter or digit (it names the role's Secret too). The names
	// PostgreSQL and daytwo keep for themselves (postgres,
	// streaming_replica, pg_*, daytwo_*) and the application owner of
	// spec.bootstrap.initdb are refused.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z_][a-z0-9_]*)?[a-z0-9]$`
	Name string `json:"name"`

	// ensure is Present (the default) or Absent.
	// +optional
	// +kubebuilder:default=Present
	Ensure RoleEnsure `json:"ensure,omitempty"`

	// login lets the role connect. A login role gets a Secret of its own,
	// <database>-role-<name> (underscores as hyphens), shaped like the
	// credentials Secret: username, password, host, port, dbname, uri and
	// ca.crt.
	// +optional
	Login bool `json:"login,omitempty"`

	// createdb lets the role create databases.
	// +optional
	CreateDB bool `json:"createdb,omitempty"`

	// inherit gives the role the privileges of the roles it is a member
	// of without SET ROLE. Defaults to true, as in PostgreSQL.
	// +optional
	Inherit *bool `json:"inherit,omitempty"`

	// connectionLimit caps the role's concurrent connections; -1 (the
	// default) is no limit.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// validUntil is when the role's password stops working. Without it the
	// password does not expire.
	// +optional
	ValidUntil *metav1.Time `json:"validUntil,omitempty"`

	// inRoles are the roles this one is a member of: other declared roles,
	// or PostgreSQL's predefined ones (pg_read_all_data, pg_monitor, ...),
	// without the admin option, inheriting as inherit says. Memberships
	// not listed are revoked. Membership in a role that would reach the
	// server itself is refused: postgres, streaming_replica, daytwo's
	// own, pg_execute_server_program, pg_read_server_files,
	// pg_write_server_files, and any superuser, replication or createrole
	// role.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z_][a-z0-9_]*$`
	InRoles []string `json:"inRoles,omitempty"`

	// passwordSecret names a Secret of your own, in the Database's
	// namespace, whose "password" key is the role's password (and whose
	// "username" key, if present, must be the role's name). Without it
	// daytwo generates the password. Either way the role's own Secret
	// carries it; a change of this Secret's password is applied.
	// +optional
	PasswordSecret *SecretReference `json:"passwordSecret,omitempty"`

	// passwordRotation rotates the generated password on a schedule. A
	// rotation, scheduled or asked for with the annotation
	// rotate.daytwo.dev/<role> (an RFC 3339 time; kubectl daytwo
	// rotate-password), never cuts off a running client: the Secret moves
	// to the role's twin login role <name>_alt (or back) with a new
	// password, and the previous one keeps working for gracePeriod. The
	// twin acts as the role itself (SET ROLE on login), so objects it
	// makes are the role's. A WebApp whose databaseRef uses the Secret
	// rolls on the change. Once the grace period ends the previous login
	// is refused and its sessions are ended.
	// +optional
	PasswordRotation *PasswordRotation `json:"passwordRotation,omitempty"`

	// superuser is refused; it is here to say so clearly.
	// +optional
	Superuser bool `json:"superuser,omitempty"`

	// createrole is refused; it is here to say so clearly.
	// +optional
	CreateRole bool `json:"createrole,omitempty"`
}

// PasswordRotation is when a role's generated password is replaced.
type PasswordRotation struct {
	// schedule is a cron expression in UTC (minute hour day-of-month
	// month day-of-week, or @daily, @weekly, @monthly). Without it
	// the password rotates only on request.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule,omitempty"`

	// gracePeriod is how long the previous password keeps working after
	// a rotation: long enough for every client to read the new Secret
	// (a WebApp's rollout). Defaults to 1h; at least 1m. A rotation due
	// within the grace period of the last one waits for it to end.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="gracePeriod must be at least 1m"
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`
}

// DefaultRotationGrace is a rotation's grace period unless the role
// says otherwise.
const DefaultRotationGrace = time.Hour

// RotationTwin is the login role a rotation of role's password
// alternates with.
func RotationTwin(role string) string { return role + "_alt" }

// TwinProblem says why role's password cannot rotate (its twin's name),
// or "".
func TwinProblem(role string) string {
	twin := RotationTwin(role)
	switch {
	case len(twin) > 63:
		return "its twin login " + twin + " would be longer than PostgreSQL's 63 characters"
	case strings.HasPrefix(twin, "pg_") || strings.HasPrefix(twin, "daytwo_"):
		return "its twin login " + twin + " would take a prefix PostgreSQL or daytwo keeps"
	}
	return ""
}

// AnnotationRotatePrefix is followed by a role's name: on a Database, it asks
// for one rotation of that role's generated password: an RFC 3339 time
// later than the role Secret's last rotation.
const AnnotationRotatePrefix = "rotate.daytwo.dev/"

// SecretReference names a Secret in the object's namespace.
type SecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// RoleState is where a declared role stands.
// +kubebuilder:validation:Enum=Applied;Dropped;Failed;Pending
type RoleState string

const (
	// RoleApplied says the role is as declared.
	RoleApplied RoleState = "Applied"
	// RoleDropped says an Absent role does not exist.
	RoleDropped RoleState = "Dropped"
	// RoleFailed says PostgreSQL refused a change; the message says why.
	RoleFailed RoleState = "Failed"
	// RolePending says no running primary was reached yet.
	RolePending RoleState = "Pending"
)

// RoleStatus is one declared role's state on the primary.
type RoleStatus struct {
	// name of the role.
	// +required
	Name string `json:"name"`
	// state is Applied, Dropped, Failed or Pending.
	// +required
	State RoleState `json:"state"`
	// message says what failed, in PostgreSQL's words, or which drift was
	// put back.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// secretName is the role's Secret (login roles).
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// lastRotationTime is when the role's password last rotated.
	// +optional
	LastRotationTime *metav1.Time `json:"lastRotationTime,omitempty"`
	// nextRotationTime is when passwordRotation.schedule rotates it next.
	// +optional
	NextRotationTime *metav1.Time `json:"nextRotationTime,omitempty"`
	// appliedFor is what the role was last applied for: its spec and its
	// Secret's version. A change the primary makes while it is the same
	// is drift put back.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AppliedFor string `json:"appliedFor,omitempty"`
}

// ConditionRolesReconciled is True when every declared role is as the
// spec says, False with the roles that failed or wait for the primary.
const ConditionRolesReconciled = "RolesReconciled"

// Reasons of ConditionRolesReconciled.
const (
	ReasonRolesApplied = "RolesApplied"
	ReasonRoleFailed   = "RoleFailed"
	ReasonRolesPending = "RolesPending"
)

// RoleSecretName is the Secret of the declared login role: its
// connection details and password.
func (d *Database) RoleSecretName(role string) string {
	return d.Name + "-role-" + strings.ReplaceAll(role, "_", "-")
}

// ForbiddenMembership says why a declared role cannot be a member of
// role, or "": the roles that reach the server itself (its files, its
// programs, its replication, every password verifier).
func (d *Database) ForbiddenMembership(role string) string {
	switch role {
	case "postgres", "streaming_replica":
		return "is a role daytwo runs the server with: a member could act as it"
	case "pg_execute_server_program", "pg_read_server_files", "pg_write_server_files":
		return "reaches the server's programs or files, which superuser is refused for"
	}
	if strings.HasPrefix(role, "daytwo_") {
		return "is a role daytwo keeps for itself"
	}
	return ""
}

// ReservedRole says why a role name cannot be declared, or "".
func (d *Database) ReservedRole(name string) string {
	_, owner := d.AppDatabase()
	switch {
	case name == "postgres" || name == "streaming_replica":
		return "is a role daytwo runs the server with"
	case strings.HasPrefix(name, "pg_"):
		return "is PostgreSQL's prefix for its predefined roles"
	case strings.HasPrefix(name, "daytwo_"):
		return "is the prefix daytwo keeps for its own roles"
	case name == owner:
		return "is the application owner, which spec.bootstrap.initdb declares and the credentials Secret holds"
	}
	for _, r := range d.Spec.Roles {
		if r.Login && RotationTwin(r.Name) == name {
			return "is the twin login role that rotations of " + r.Name + "'s password alternate with"
		}
	}
	return ""
}

// MembershipProblem says why declared role cannot be a member of group
// in db's spec, or "".
func MembershipProblem(db *Database, role, group string) string {
	if group == role {
		return "a role cannot be a member of itself"
	}
	if why := db.ForbiddenMembership(group); why != "" {
		return why
	}
	for _, r := range db.Spec.Roles {
		if r.Name == group && r.Ensure == RoleEnsureAbsent {
			return "is declared Absent"
		}
	}
	return ""
}
