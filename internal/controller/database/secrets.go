package database

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// ensureSecrets creates the credentials and replication Secrets once. They
// are never regenerated: a Secret kept by deletionPolicy Retain is taken
// back by a new Database of the same name, so it still opens the kept data.
func (r *Reconciler) ensureSecrets(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	for _, s := range []struct {
		name string
		data func(string) map[string][]byte
	}{
		{db.CredentialsSecretName(), func(pw string) map[string][]byte { return credentialsData(db, pw) }},
		{replicationName(db), func(pw string) map[string][]byte { return map[string][]byte{v1alpha1.CredentialsPassword: []byte(pw)} }},
		// The token the instance API asks of whoever promotes an instance.
		{apiSecretName(db), func(pw string) map[string][]byte { return map[string][]byte{v1alpha1.CredentialsPassword: []byte(pw)} }},
	} {
		msg, err := r.ensureSecret(ctx, db, s.name, s.data)
		if err != nil || msg != "" {
			obs.found.conflict = msg
			return err
		}
	}
	return nil
}

func (r *Reconciler) ensureSecret(ctx context.Context, db *v1alpha1.Database, name string, data func(string) map[string][]byte) (string, error) {
	// Secrets are cached as metadata only: the operator never holds their data.
	s := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, name)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
	if apierrors.IsNotFound(err) {
		// The cache may not show a Secret created a moment ago: ask the API
		// before creating one.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), s)
		if apierrors.IsNotFound(err) {
			return "", r.createSecret(ctx, db, name, data)
		}
	}
	if err != nil {
		return "", fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	owner := metav1.GetControllerOf(s)
	switch {
	case owner != nil && owner.UID == db.UID:
		return "", nil
	case owner == nil && s.Labels[labelDatabase] == db.Name:
		full := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), full); err != nil {
			return "", fmt.Errorf("failed to get Secret %s: %w", name, err)
		}
		if len(full.Data[v1alpha1.CredentialsPassword]) == 0 {
			return fmt.Sprintf("Secret %s exists without a %q key", name, v1alpha1.CredentialsPassword), nil
		}
		return "", r.takeBack(ctx, db, s)
	default:
		return fmt.Sprintf("Secret %s exists and does not belong to this Database", name), nil
	}
}

// takeBack makes db the controller of a Secret that deletionPolicy Retain
// released from a Database of the same name.
func (r *Reconciler) takeBack(ctx context.Context, db *v1alpha1.Database, s client.Object) error {
	base := s.DeepCopyObject().(client.Object)
	if err := controllerutil.SetControllerReference(db, s, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to take back Secret %s: %w", s.GetName(), err)
	}
	controller.Event(ctx, r.Recorder, db, s, corev1.EventTypeNormal, "Adopted", "Adopt", "Took back the kept Secret %s", s.GetName())
	return nil
}

func (r *Reconciler) createSecret(ctx context.Context, db *v1alpha1.Database, name string, data func(string) map[string][]byte) error {
	pw, err := postgres.Password()
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels(db)},
		Type:       corev1.SecretTypeOpaque,
		Data:       data(pw),
	}
	if err := controllerutil.SetControllerReference(db, s, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, s); err != nil {
		return fmt.Errorf("failed to create Secret %s: %w", name, err)
	}
	return nil
}
