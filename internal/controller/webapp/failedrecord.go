package webapp

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

// The failed-revision record: a ConfigMap the WebApp owns, holding the
// revision that failed (a missed progress deadline or an aborted canary),
// the canary's abort signal, and the good pod template that replaced it.
// The stable Deployment carries the same record (annotationFailedTemplate),
// but a deleted Deployment loses it: made again from the spec, it would
// roll the failed revision to every pod. The record survives it.
const (
	// annotationRecordRevision on the record is the failed revision it
	// holds ("" once a revision rolled out normally since), readable from
	// the metadata cache every reconcile.
	annotationRecordRevision = "daytwo.dev/failed-revision"

	recordRevision = "revision"
	recordSignal   = "signal"
	recordTemplate = "template.json"
)

func failedRecordName(app *v1alpha1.WebApp) string { return app.Name + "-failed-revision" }

// failedRecord is the record of failed, with the good template that runs
// instead.
func failedRecord(app *v1alpha1.WebApp, failed failure, good *corev1ac.PodTemplateSpecApplyConfiguration) (*corev1ac.ConfigMapApplyConfiguration, error) {
	tpl, err := json.Marshal(good)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the good template: %w", err)
	}
	data := map[string]string{recordRevision: failed.revision, recordTemplate: string(tpl)}
	if failed.signal != "" {
		data[recordSignal] = failed.signal
	}
	return emptyRecord(app, failed.revision).WithData(data), nil
}

// emptyRecord is the record's object with no failure in it.
func emptyRecord(app *v1alpha1.WebApp, revision string) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(failedRecordName(app), app.Namespace).
		WithLabels(labels(app)).
		WithAnnotations(map[string]string{annotationRecordRevision: revision}).
		WithOwnerReferences(ownerReference(app))
}

// syncFailedRecord keeps the record in step with what the Deployment was
// given: the failure and the good template that runs instead, or no
// failure once a revision rolls out normally (a revision that failed
// once and works later is not held back by an old record). It reads the
// record from the metadata cache and writes only when it differs.
func (r *Reconciler) syncFailedRecord(ctx context.Context, app *v1alpha1.WebApp, failed failure, good *corev1ac.PodTemplateSpecApplyConfiguration) error {
	recorded, err := r.recordedRevision(ctx, app)
	if err != nil || recorded == failed.revision {
		return err
	}
	cm := emptyRecord(app, "")
	if failed.revision != "" {
		if cm, err = failedRecord(app, failed, good); err != nil {
			return err
		}
	}
	return controller.Apply(ctx, r.Client, cm, "ConfigMap "+failedRecordName(app))
}

// recordedFailure reads the record when it names revision: the failure and
// the good template, or a zero failure (no record, or another revision's).
// A WebApp no reconcile has reported on yet (no condition) has no record:
// the record is the WebApp's, written by a reconcile, and every reconcile
// reports. For it the metadata cache is asked, and a new WebApp costs no
// read of the API server. Any other is read from the API server: the
// metadata cache, a watch of its own, may lag behind the Deployment's.
func (r *Reconciler) recordedFailure(ctx context.Context, app *v1alpha1.WebApp, revision string) (failure, *corev1ac.PodTemplateSpecApplyConfiguration, error) {
	if len(app.Status.Conditions) == 0 {
		if recorded, err := r.recordedRevision(ctx, app); err != nil || recorded != revision {
			return failure{}, nil, err
		}
	}
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: failedRecordName(app)}, cm)
	if err != nil || cm.Annotations[annotationRecordRevision] != revision || cm.Data[recordRevision] != revision || !metav1.IsControlledBy(cm, app) {
		return failure{}, nil, client.IgnoreNotFound(err)
	}
	good := &corev1ac.PodTemplateSpecApplyConfiguration{}
	if err := json.Unmarshal([]byte(cm.Data[recordTemplate]), good); err != nil {
		return failure{}, nil, nil //nolint:nilerr // a damaged record is no record: the Deployment is made from the spec
	}
	return failure{revision: revision, signal: cm.Data[recordSignal]}, good, nil
}

// recordedRevision is the failed revision the record names, from the
// metadata cache: "" when there is no record or it names none.
func (r *Reconciler) recordedRevision(ctx context.Context, app *v1alpha1.WebApp) (string, error) {
	meta := controller.Named[metav1.PartialObjectMetadata](app.Namespace, failedRecordName(app))
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(meta), meta); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("failed to read the failed-revision record: %w", err)
		}
		return "", nil
	}
	return meta.Annotations[annotationRecordRevision], nil
}
