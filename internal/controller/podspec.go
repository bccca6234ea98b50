package controller

import (
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// ApplyConfigs turns typed API values into apply configurations. Both share the
// JSON schema, so a JSON round trip is exact for the user-supplied parts
// (env, probes, resources) that have no typed constructor.
func ApplyConfigs[AC any, T any](in []T) []*AC {
	out := make([]*AC, 0, len(in))
	for i := range in {
		out = append(out, ApplyConfig[AC](&in[i]))
	}
	return out
}

// Overlay is def with each top-level field that user sets replaced by
// user's, as an apply configuration: a security override changes what it
// names and keeps the rest of the restricted default.
func Overlay[AC any, T any](def, user *T) *AC {
	merged := map[string]json.RawMessage{}
	for _, v := range []*T{def, user} {
		if v == nil {
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(mustMarshal(v), &fields); err != nil {
			panic(fmt.Sprintf("unmarshal %T: %v", v, err)) // a struct marshals to an object
		}
		maps.Copy(merged, fields)
	}
	return ApplyConfig[AC](&merged)
}

func mustMarshal(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err)) // API types always marshal
	}
	return raw
}

// ApplyConfig turns one typed API value into its apply configuration
// (nil stays nil).
func ApplyConfig[AC any, T any](in *T) *AC {
	if in == nil {
		return nil
	}
	out := new(AC)
	if err := json.Unmarshal(mustMarshal(in), out); err != nil {
		panic(fmt.Sprintf("unmarshal into %T: %v", out, err)) // same schema on both sides
	}
	return out
}

// Place sets a pod's node pool (nodeSelector, tolerations), priority and
// image pull Secrets from a kind's spec; affinity is each kind's own.
// Unset fields add nothing, so a template stays as it was.
func Place(spec *corev1ac.PodSpecApplyConfiguration, pl v1alpha1.Placement, pullSecrets []corev1.LocalObjectReference) {
	if len(pl.NodeSelector) > 0 {
		spec.WithNodeSelector(pl.NodeSelector)
	}
	spec.WithTolerations(ApplyConfigs[corev1ac.TolerationApplyConfiguration](pl.Tolerations)...)
	if pl.PriorityClassName != "" {
		spec.WithPriorityClassName(pl.PriorityClassName)
	}
	for _, s := range pullSecrets {
		spec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
}
