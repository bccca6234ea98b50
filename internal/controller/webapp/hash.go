package webapp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// hashOf is a short, stable digest of v's JSON form.
func hashOf(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called on API types, which always marshal
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// revisionOf identifies the revision of app's pods by what the user
// declared and what the pods read, not by how this operator renders them:
// a failed revision stays failed across an operator upgrade that changes
// the rendering. Fields that do not reach the pod template are left out,
// so scaling does not retry a failed revision; a field added to the spec
// later is in until it is listed here.
func revisionOf(app *v1alpha1.WebApp, in podInputs) string {
	spec := app.Spec.DeepCopy()
	spec.Replicas, spec.Autoscaling, spec.Rollout, spec.Ingress, spec.DeletionPolicy = nil, nil, nil, nil, ""
	return hashOf(struct {
		Spec           *v1alpha1.WebAppSpec
		Selector       map[string]string
		ConfigHash     string
		DatabaseSecret string
	}{spec, in.selector, in.configHash, in.databaseSecret})
}
