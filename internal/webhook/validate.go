package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
	"github.com/daytwo-dev/daytwo/internal/schedule"
)

// Paths the webhook serves, as config/webhook names them.
const (
	PathDatabaseBackup = "/validate-daytwo-dev-v1alpha1-databasebackup"
	PathDatabase       = "/validate-daytwo-dev-v1alpha1-database"
)

// Setup registers the validators with mgr's webhook server.
func Setup(mgr manager.Manager) error {
	if err := builder.WebhookManagedBy(mgr, &v1alpha1.DatabaseBackup{}).WithValidator(backupValidator{}).
		WithValidatorCustomPath(PathDatabaseBackup).Complete(); err != nil {
		return fmt.Errorf("failed to set up the DatabaseBackup webhook: %w", err)
	}
	if err := builder.WebhookManagedBy(mgr, &v1alpha1.Database{}).WithValidator(databaseValidator{}).
		WithValidatorCustomPath(PathDatabase).Complete(); err != nil {
		return fmt.Errorf("failed to set up the Database webhook: %w", err)
	}
	return nil
}

type backupValidator struct{}

func (backupValidator) ValidateCreate(_ context.Context, b *v1alpha1.DatabaseBackup) (admission.Warnings, error) {
	return nil, ValidateDatabaseBackup(b)
}

func (backupValidator) ValidateUpdate(_ context.Context, _, b *v1alpha1.DatabaseBackup) (admission.Warnings, error) {
	return nil, ValidateDatabaseBackup(b)
}

func (backupValidator) ValidateDelete(context.Context, *v1alpha1.DatabaseBackup) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDatabaseBackup checks the schedules with the parser the
// scheduler uses and the time zone against the tz database.
func ValidateDatabaseBackup(b *v1alpha1.DatabaseBackup) error {
	spec := field.NewPath("spec")
	tz, errs := validateTimeZone(spec.Child("timeZone"), b.Spec.TimeZone)
	errs = append(errs, validateSchedule(spec.Child("schedule"), b.Spec.Schedule, tz)...)
	if v := b.Spec.Verify; v != nil {
		errs = append(errs, validateSchedule(spec.Child("verify", "schedule"), v.Schedule, tz)...)
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("DatabaseBackup").GroupKind(), b.Name, errs)
}

// validateTimeZone returns the zone tz names when the tz database has it
// ("" for UTC or a zone it lacks).
func validateTimeZone(path *field.Path, tz *string) (string, field.ErrorList) {
	if tz == nil {
		return "", nil
	}
	if _, err := time.LoadLocation(*tz); err != nil {
		return "", field.ErrorList{field.Invalid(path, *tz, "not a time zone of the tz database")}
	}
	return *tz, nil
}

// validateSchedule parses a schedule ("" for none) as the scheduler will.
func validateSchedule(path *field.Path, expr, tz string) field.ErrorList {
	if expr == "" {
		return nil
	}
	if _, err := schedule.Parse(expr, tz); err != nil {
		return field.ErrorList{field.Invalid(path, expr, err.Error())}
	}
	return nil
}

type databaseValidator struct{}

func (databaseValidator) ValidateCreate(_ context.Context, db *v1alpha1.Database) (admission.Warnings, error) {
	return nil, ValidateDatabase(db)
}

func (databaseValidator) ValidateUpdate(_ context.Context, _, db *v1alpha1.Database) (admission.Warnings, error) {
	return nil, ValidateDatabase(db)
}

func (databaseValidator) ValidateDelete(context.Context, *v1alpha1.Database) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDatabase refuses what the API's schema cannot: an image whose
// tag names another PostgreSQL major than spec.version (an image without a
// recognisable tag passes: the instance manager refuses a data directory of
// another major), a backup schedule or time zone the scheduler cannot use
// (the operator's own DatabaseBackup would be refused later, where nobody
// looks), and a synchronous_commit that voids required durability.
func ValidateDatabase(db *v1alpha1.Database) error {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if m := postgres.ImageMajor(db.Spec.Image); db.Spec.Image != "" && m != "" && m != db.Spec.Version {
		errs = append(errs, field.Invalid(spec.Child("image"), db.Spec.Image,
			fmt.Sprintf("is PostgreSQL %s but spec.version is %s", m, db.Spec.Version)))
	}
	if b := db.Spec.Backup; b != nil {
		tz, tzErrs := validateTimeZone(spec.Child("backup", "timeZone"), b.TimeZone)
		errs = append(append(errs, tzErrs...), validateSchedule(spec.Child("backup", "schedule"), b.Schedule, tz)...)
	}
	errs = append(errs, validateDurability(spec, db)...)
	errs = append(errs, validateRoles(spec.Child("roles"), db)...)
	if why := db.PoolerProblem(); why != "" {
		errs = append(errs, field.Invalid(spec.Child("pooler"), "", why))
	}
	for i := range db.Spec.Databases {
		if why := db.DatabaseProblem(i); why != "" {
			errs = append(errs, field.Invalid(spec.Child("databases").Index(i), db.Spec.Databases[i].Name, why))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("Database").GroupKind(), db.Name, errs)
}

// validateRoles refuses a declared role with a name PostgreSQL or daytwo
// keeps (the schema cannot know the application owner's, or a rotation
// twin's), a rotation schedule the scheduler cannot use, and a
// membership in itself, in a role that reaches the server, or in a role
// declared Absent.
func validateRoles(path *field.Path, db *v1alpha1.Database) field.ErrorList {
	var errs field.ErrorList
	for i, r := range db.Spec.Roles {
		if why := db.ReservedRole(r.Name); why != "" {
			errs = append(errs, field.Invalid(path.Index(i).Child("name"), r.Name, why))
		}
		for _, g := range r.InRoles {
			if why := v1alpha1.MembershipProblem(db, r.Name, g); why != "" {
				errs = append(errs, field.Invalid(path.Index(i).Child("inRoles"), g, why))
			}
		}
		if rot := r.PasswordRotation; rot != nil {
			errs = append(errs, validateSchedule(path.Index(i).Child("passwordRotation", "schedule"), rot.Schedule, "")...)
			if why := v1alpha1.TwinProblem(r.Name); why != "" {
				errs = append(errs, field.Invalid(path.Index(i).Child("passwordRotation"), r.Name, why))
			}
		}
	}
	return errs
}

// validateDurability refuses synchronous_commit off or local under
// required durability: a commit would then be acknowledged before any
// replica has it, and failover, which counts on the replicas holding every
// acknowledged commit, would lose it.
func validateDurability(spec *field.Path, db *v1alpha1.Database) field.ErrorList {
	r := db.Spec.Replication
	if r == nil || r.Synchronous == nil || r.Synchronous.DataDurability == v1alpha1.DataDurabilityPreferred {
		return nil
	}
	v, ok := db.Spec.Parameters["synchronous_commit"]
	if !ok {
		return nil
	}
	switch strings.ToLower(strings.Trim(strings.TrimSpace(v), `'"`)) {
	case "off", "false", "no", "0", "local":
		return field.ErrorList{field.Invalid(spec.Child("parameters", "synchronous_commit"), v,
			"commits would be acknowledged before a replica has them, which spec.replication.synchronous.dataDurability required forbids; "+
				"use on, remote_write or remote_apply, or dataDurability preferred")}
	}
	return nil
}
