package databasebackup

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
)

// labelSeriesKeyOf marks a series key Secret daytwo made, with the
// DatabaseBackup it made it for.
const labelSeriesKeyOf = "daytwo.dev/series-key-of"

// ensureKeys makes b's series key exist and checks its encryption key,
// returning the condition reason and message of the first problem.
func (r *Reconciler) ensureKeys(ctx context.Context, b *v1alpha1.DatabaseBackup) (reason, problem string, err error) {
	if problem, err = r.ensureSeriesKey(ctx, b); err != nil || problem != "" {
		return v1alpha1.ReasonSeriesKeyUnusable, problem, err
	}
	problem, err = r.encryptionKeyProblem(ctx, b)
	return v1alpha1.ReasonEncryptionKeyUnusable, problem, err
}

// ensureSeriesKey makes b's series key Secret exist: the one spec names
// must (missing says so when it does not); daytwo's own is created with a
// random key, once: when it goes after backups were taken, a new key could
// not verify them, so missing asks for it back. daytwo's Secret has no
// owner: the backups outlive the DatabaseBackup (a Snapshot deletion, a
// restore from the bucket), and so must the key that authenticates them.
// A key of the wrong size is named too, before a Job fails on it.
func (r *Reconciler) ensureSeriesKey(ctx context.Context, b *v1alpha1.DatabaseBackup) (missing string, err error) {
	name, key := series.KeySecret(b)
	field := "the series key Secret " + name
	if b.Spec.SeriesKeySecretRef != nil {
		field = "spec.seriesKeySecretRef: Secret " + name
	}
	existing := &corev1.Secret{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, existing)
	switch {
	case err == nil:
		// Encryption alone keeps data secret, not whole: an empty series
		// key (authentication off) is refused beside it.
		return keyProblem(existing, key, field, b.Spec.Encryption == nil), nil
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("failed to get Secret %s: %w", name, err)
	case b.Spec.SeriesKeySecretRef != nil:
		return field + " does not exist", nil
	case b.Status.LastBackupTime != nil:
		return field + " is gone, and the backups taken need its key: create it again from your copy " +
			"(or name another in spec.seriesKeySecretRef); a new key could not verify them", nil
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: name, Labels: map[string]string{
			labelSeriesKeyOf: b.Name, "app.kubernetes.io/managed-by": "daytwo"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{key: []byte(hex.EncodeToString(raw))},
	}
	if err := r.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("failed to create the series key Secret %s: %w", name, err)
	}
	return "", nil
}

// keyProblem says what is wrong with key of Secret s as a key of daytwo's
// ("" when nothing): missing, or shorter than backup.MinKeyBytes (empty
// is allowed where it turns a feature off).
func keyProblem(s *corev1.Secret, key, field string, emptyOff bool) string {
	v, ok := s.Data[key]
	n := len(bytes.TrimSpace(v))
	if ok && (n >= backup.MinKeyBytes || n == 0 && emptyOff) {
		return ""
	}
	off := ""
	if emptyOff {
		off = " (or be empty, to turn authentication off)"
	}
	return fmt.Sprintf("%s: key %q must hold at least %d bytes%s; it holds %d", field, key, backup.MinKeyBytes, off, n)
}

// encryptionKeyProblem says what is wrong with the encryption key b's
// spec names ("" when nothing, or when it names none).
func (r *Reconciler) encryptionKeyProblem(ctx context.Context, b *v1alpha1.DatabaseBackup) (string, error) {
	e := b.Spec.Encryption
	if e == nil {
		return "", nil
	}
	field := "spec.encryption.keySecretRef: Secret " + e.KeySecretRef.Name
	s := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: e.KeySecretRef.Name}, s); {
	case apierrors.IsNotFound(err):
		return field + " does not exist", nil
	case err != nil:
		return "", fmt.Errorf("failed to get Secret %s: %w", e.KeySecretRef.Name, err)
	}
	return keyProblem(s, cmp.Or(e.KeySecretRef.Key, series.KeyKey), field, false), nil
}
