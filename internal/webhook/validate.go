package webhook

import (
	"context"
	"fmt"
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
	var errs field.ErrorList
	spec := field.NewPath("spec")
	tz := ""
	if b.Spec.TimeZone != nil {
		tz = *b.Spec.TimeZone
		if _, err := time.LoadLocation(tz); err != nil {
			errs = append(errs, field.Invalid(spec.Child("timeZone"), tz, "not a time zone of the tz database"))
			tz = ""
		}
	}
	if b.Spec.Schedule != "" {
		if _, err := schedule.Parse(b.Spec.Schedule, tz); err != nil {
			errs = append(errs, field.Invalid(spec.Child("schedule"), b.Spec.Schedule, err.Error()))
		}
	}
	if v := b.Spec.Verify; v != nil && v.Schedule != "" {
		if _, err := schedule.Parse(v.Schedule, tz); err != nil {
			errs = append(errs, field.Invalid(spec.Child("verify", "schedule"), v.Schedule, err.Error()))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("DatabaseBackup").GroupKind(), b.Name, errs)
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

// ValidateDatabase refuses an image whose tag names another PostgreSQL
// major than spec.version (an image without a recognisable tag passes:
// the instance manager refuses a data directory of another major).
func ValidateDatabase(db *v1alpha1.Database) error {
	if db.Spec.Image == "" {
		return nil
	}
	if m := postgres.ImageMajor(db.Spec.Image); m != "" && m != db.Spec.Version {
		return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("Database").GroupKind(), db.Name, field.ErrorList{
			field.Invalid(field.NewPath("spec", "image"), db.Spec.Image,
				fmt.Sprintf("is PostgreSQL %s but spec.version is %s", m, db.Spec.Version))})
	}
	return nil
}
