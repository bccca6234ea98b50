package v1alpha1

import (
	"fmt"
	"strings"
)

// LogicalDatabase is a database inside the PostgreSQL server that daytwo
// makes and keeps as declared: its owner, its schemas and its extensions.
// One removed from the list is left as it is, data and all: daytwo never
// drops a database (DROP DATABASE it yourself when you mean it).
type LogicalDatabase struct {
	// name is the database's name: lower case letters, digits and
	// underscores. postgres, template0 and template1 are refused; the
	// application database of spec.bootstrap.initdb may be listed, for its
	// schemas and extensions (its owner stays the application owner).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`

	// owner is the role that owns the database: the application owner (the
	// default) or a role of spec.roles.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Owner string `json:"owner,omitempty"`

	// schemas are made in the database, owned by their owner (the
	// database's by default).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Schemas []DatabaseSchema `json:"schemas,omitempty"`

	// extensions are created in the database (CREATE EXTENSION), at the
	// version asked for or the image's default, and updated to it (ALTER
	// EXTENSION ... UPDATE) when it changes. A trusted extension is created
	// as the database's owner (in public by default); an untrusted one,
	// whose scripts need a superuser, only in a schema of its own that a
	// superuser owns (daytwo makes it, with USAGE for the owner). Which
	// extensions an image has is listed in docs/database.md.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Extensions []DatabaseExtension `json:"extensions,omitempty"`
}

// DatabaseSchema is a schema of a declared database.
type DatabaseSchema struct {
	// name of the schema.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`
	// owner of the schema: the database's owner by default.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Owner string `json:"owner,omitempty"`
	// ensure is Present (the default) or Absent (dropped when empty).
	// +optional
	// +kubebuilder:default=Present
	Ensure RoleEnsure `json:"ensure,omitempty"`
}

// DatabaseExtension is an extension of a declared database.
type DatabaseExtension struct {
	// name of the extension, as pg_available_extensions lists it
	// (vector, postgis, pg_trgm, uuid-ossp, ...).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	Name string `json:"name"`
	// version to run; the default version the image has when empty (and
	// then left at what it is once created).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Version string `json:"version,omitempty"`
	// schema the extension's objects go in (created if missing); the
	// database's default (public) when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Schema string `json:"schema,omitempty"`
	// ensure is Present (the default) or Absent (DROP EXTENSION, refused
	// while other objects depend on it).
	// +optional
	// +kubebuilder:default=Present
	Ensure RoleEnsure `json:"ensure,omitempty"`
}

// LogicalDatabaseStatus is one declared database's state on the primary.
type LogicalDatabaseStatus struct {
	// name of the database.
	// +required
	Name string `json:"name"`
	// state is Applied, Dropped, Failed or Pending, as for roles.
	// +required
	State RoleState `json:"state"`
	// message says what failed, in PostgreSQL's words (the database, a
	// schema or an extension).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// extensions are the extensions' versions as installed.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Extensions []ExtensionStatus `json:"extensions,omitempty"`
}

// ExtensionStatus is an extension as installed.
type ExtensionStatus struct {
	// name of the extension.
	// +required
	Name string `json:"name"`
	// version installed.
	// +required
	Version string `json:"version"`
}

// ConditionDatabasesReconciled is True when every declared database is
// as spec.databases says.
const ConditionDatabasesReconciled = "DatabasesReconciled"

// Reasons of ConditionDatabasesReconciled.
const (
	ReasonDatabasesApplied = "DatabasesApplied"
	ReasonDatabaseFailed   = "DatabaseFailed"
	ReasonDatabasesPending = "DatabasesPending"
)

// ReservedDatabase says why a database name cannot be declared, or "".
func ReservedDatabase(name string) string {
	switch name {
	case "postgres", "template0", "template1":
		return "is a database PostgreSQL keeps for itself"
	}
	return ""
}

// DatabaseOwner is the owner of the declared database d in db: its owner,
// or the application owner.
func (db *Database) DatabaseOwner(d LogicalDatabase) string {
	_, owner := db.AppDatabase()
	if d.Owner != "" {
		return d.Owner
	}
	return owner
}

// OwnerProblem says why role cannot own a declared database or schema of
// db, or "": it must be the application owner or a role spec.roles keeps.
func (db *Database) OwnerProblem(role string) string {
	if _, owner := db.AppDatabase(); role == owner {
		return ""
	}
	for _, r := range db.Spec.Roles {
		if r.Name == role {
			if r.Ensure == RoleEnsureAbsent {
				return "is declared Absent in spec.roles"
			}
			return ""
		}
	}
	return "is neither the application owner nor a role of spec.roles"
}

// DatabaseProblem says what is wrong with spec.databases[i], naming the
// field, or "": what the API's schema cannot say (the webhook refuses it,
// and the operator reports it where the webhook does not run).
func (db *Database) DatabaseProblem(i int) string {
	app, owner := db.AppDatabase()
	d := db.Spec.Databases[i]
	at := fmt.Sprintf("spec.databases[%d]", i)
	if why := ReservedDatabase(d.Name); why != "" {
		return fmt.Sprintf("%s.name: %s %s", at, d.Name, why)
	}
	if d.Name == app && d.Owner != "" && d.Owner != owner {
		return fmt.Sprintf("%s.owner: %s is the application database, owned by the application owner %s", at, d.Name, owner)
	}
	if why := db.OwnerProblem(db.DatabaseOwner(d)); why != "" {
		return fmt.Sprintf("%s.owner: %s %s", at, db.DatabaseOwner(d), why)
	}
	for j, s := range d.Schemas {
		if strings.HasPrefix(s.Name, "pg_") || s.Name == "information_schema" {
			return fmt.Sprintf("%s.schemas[%d].name: %s is PostgreSQL's own", at, j, s.Name)
		}
		if s.Owner == "" || s.Ensure == RoleEnsureAbsent {
			continue
		}
		if why := db.OwnerProblem(s.Owner); why != "" {
			return fmt.Sprintf("%s.schemas[%d].owner: %s %s", at, j, s.Owner, why)
		}
	}
	return ""
}

// RoleDatabase is the database a login role's Secret names: the first of
// spec.databases it owns that status.databases says was applied (a
// Secret never names a database before it exists), or the application
// database.
func (db *Database) RoleDatabase(role string) string {
	applied := map[string]bool{}
	for _, s := range db.Status.Databases {
		applied[s.Name] = s.State == RoleApplied
	}
	for _, d := range db.Spec.Databases {
		if d.Owner == role && applied[d.Name] {
			return d.Name
		}
	}
	app, _ := db.AppDatabase()
	return app
}
