package webapp

import (
	"cmp"
	"slices"

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
// configRefs, env valueFrom and envFrom. Sorted and deduplicated, so the
// config hash does not depend on spec order.
func configReferences(app *v1alpha1.WebApp) []reference {
	var refs []reference
	for _, r := range app.Spec.ConfigRefs {
		refs = append(refs, reference{Kind: string(r.Kind), Name: r.Name})
	}
	for _, e := range app.Spec.Env {
		if e.ValueFrom == nil {
			continue
		}
		if k := e.ValueFrom.ConfigMapKeyRef; k != nil {
			refs = append(refs, reference{Kind: kindConfigMap, Name: k.Name, Optional: k.Optional != nil && *k.Optional})
		}
		if k := e.ValueFrom.SecretKeyRef; k != nil {
			refs = append(refs, reference{Kind: kindSecret, Name: k.Name, Optional: k.Optional != nil && *k.Optional})
		}
	}
	for _, e := range app.Spec.EnvFrom {
		if c := e.ConfigMapRef; c != nil {
			refs = append(refs, reference{Kind: kindConfigMap, Name: c.Name, Optional: c.Optional != nil && *c.Optional})
		}
		if s := e.SecretRef; s != nil {
			refs = append(refs, reference{Kind: kindSecret, Name: s.Name, Optional: s.Optional != nil && *s.Optional})
		}
	}
	slices.SortFunc(refs, func(a, b reference) int {
		return cmp.Or(cmp.Compare(a.key(), b.key()), cmp.Compare(boolInt(a.Optional), boolInt(b.Optional)))
	})
	// A name referenced both optionally and not is required.
	return slices.CompactFunc(refs, func(a, b reference) bool { return a.key() == b.key() })
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
