package database

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// haHost is the Database controller's side of ha.Actor: the pods and the
// instance managers' API, which the actor asks without owning.
type haHost struct{ r *Reconciler }

var _ ha.Host = haHost{}

func (h haHost) AskInstances(ctx context.Context, db *v1alpha1.Database, pods []corev1.Pod, skip string, fresh bool) ([]v1alpha1.InstanceStatus, map[string]instanceapi.Status) {
	return h.r.askInstances(ctx, db, pods, skip, fresh)
}

func (h haHost) ListPods(ctx context.Context, db *v1alpha1.Database) ([]corev1.Pod, error) {
	return h.r.listPods(ctx, db)
}

func (h haHost) LabelRoles(ctx context.Context, pods []corev1.Pod, primary string) error {
	// The HA actor knows nothing of fences: a pod labelled fenced stays so
	// (the Database's own reconcile lifts the label with the fence).
	return h.r.labelRoles(ctx, pods, primary, labelledFenced)
}

func (h haHost) Target(ctx context.Context, db *v1alpha1.Database, pod *corev1.Pod) (instanceapi.Target, error) {
	return h.r.target(ctx, db, pod)
}

func (h haHost) APIToken(ctx context.Context, db *v1alpha1.Database) (string, error) {
	return h.r.apiToken(ctx, db)
}

// apiToken reads the token instance managers ask of whoever changes them.
func (r *Reconciler) apiToken(ctx context.Context, db *v1alpha1.Database) (string, error) {
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: apiSecretName(db)}, s); err != nil {
		return "", fmt.Errorf("failed to read the instance API token: %w", err)
	}
	return string(s.Data[v1alpha1.CredentialsPassword]), nil
}

// actor is the HA actor over this controller's clients.
func (r *Reconciler) actor() *ha.Actor {
	return &ha.Actor{Client: r.Client, Recorder: r.Recorder, Clock: r.Clock, Instances: r.Instances, Host: haHost{r}}
}
