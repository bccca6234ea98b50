package webapp

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Kinds a WebApp can reference; also the prefixes of the reference index.
const (
	kindConfigMap = "ConfigMap"
	kindSecret    = "Secret"
	kindDatabase  = "Database"
)

// reference is one object the pod template depends on.
type reference struct {
	Kind, Name string
	// Optional references may be absent without blocking the rollout.
	Optional bool
}

func (r reference) key() string { return r.Kind + "/" + r.Name }

// configReferences lists the ConfigMaps and Secrets app's pods read: from
// configRefs, every container's env valueFrom and envFrom, and volumes. Sorted and deduplicated, so the
// config hash does not depend on spec order.
func configReferences(app *v1alpha1.WebApp) []reference {
	var refs []reference
	for _, r := range app.Spec.ConfigRefs {
		refs = append(refs, reference{Kind: string(r.Kind), Name: r.Name})
	}
	refs = append(refs, envReferences(app.Spec.Env, app.Spec.EnvFrom)...)
	for _, c := range slices.Concat(app.Spec.InitContainers, app.Spec.Sidecars) {
		refs = append(refs, envReferences(c.Env, c.EnvFrom)...)
	}
	for _, v := range app.Spec.Volumes {
		if c := v.ConfigMap; c != nil {
			refs = append(refs, reference{Kind: kindConfigMap, Name: c.Name, Optional: ptr.Deref(c.Optional, false)})
		}
		if s := v.Secret; s != nil {
			refs = append(refs, reference{Kind: kindSecret, Name: s.SecretName, Optional: ptr.Deref(s.Optional, false)})
		}
	}
	slices.SortFunc(refs, func(a, b reference) int {
		return cmp.Or(cmp.Compare(a.key(), b.key()), cmp.Compare(boolInt(a.Optional), boolInt(b.Optional)))
	})
	// A name referenced both optionally and not is required.
	return slices.CompactFunc(refs, func(a, b reference) bool { return a.key() == b.key() })
}

// envReferences are the ConfigMaps and Secrets one container's env and
// envFrom read.
func envReferences(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) []reference {
	var refs []reference
	for _, e := range env {
		if e.ValueFrom == nil {
			continue
		}
		if k := e.ValueFrom.ConfigMapKeyRef; k != nil {
			refs = append(refs, reference{Kind: kindConfigMap, Name: k.Name, Optional: ptr.Deref(k.Optional, false)})
		}
		if k := e.ValueFrom.SecretKeyRef; k != nil {
			refs = append(refs, reference{Kind: kindSecret, Name: k.Name, Optional: ptr.Deref(k.Optional, false)})
		}
	}
	for _, e := range envFrom {
		if c := e.ConfigMapRef; c != nil {
			refs = append(refs, reference{Kind: kindConfigMap, Name: c.Name, Optional: ptr.Deref(c.Optional, false)})
		}
		if s := e.SecretRef; s != nil {
			refs = append(refs, reference{Kind: kindSecret, Name: s.Name, Optional: ptr.Deref(s.Optional, false)})
		}
	}
	return refs
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// indexKeys are the reference index entries of app: every ConfigMap, Secret
// and Database it names, so a change to one finds the WebApps to reconcile.
func indexKeys(app *v1alpha1.WebApp) []string {
	var keys []string
	for _, r := range configReferences(app) {
		keys = append(keys, r.key())
	}
	if ref := app.Spec.DatabaseRef; ref != nil {
		keys = append(keys, kindDatabase+"/"+ref.Name, kindSecret+"/"+ref.SecretName())
	}
	return keys
}
