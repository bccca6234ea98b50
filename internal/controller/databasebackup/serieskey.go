package databasebackup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// labelSeriesKeyOf marks a series key Secret daytwo made, with the
// DatabaseBackup it made it for.
const labelSeriesKeyOf = "daytwo.dev/series-key-of"

// ensureSeriesKey makes b's series key Secret exist: the one spec names
// must (missing says so when it does not); daytwo's own is created with a
// random key. daytwo's Secret has no owner: the backups outlive the
// DatabaseBackup (a Snapshot deletion, a restore from the bucket), and so
// must the key that authenticates them. The key is read only by the Jobs
// and restores that use it; the operator checks that the Secret exists.
func (r *Reconciler) ensureSeriesKey(ctx context.Context, b *v1alpha1.DatabaseBackup) (missing string, err error) {
	name, key := SeriesKeySecret(b)
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, meta)
	switch {
	case err == nil:
		return "", nil
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("failed to get Secret %s: %w", name, err)
	case b.Spec.SeriesKeySecretRef != nil:
		return fmt.Sprintf("spec.seriesKeySecretRef: Secret %s does not exist", name), nil
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
