package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Sent holds, per child daytwo has just applied, the Fingerprint of the
// apply configuration it sent and the resource version the API server
// answered with, until the informer's transform takes it (Take) for the
// watch event of that version. daytwo's part of that version is what it
// sent, so the transform need not extract it from the managed fields
// again: extracting a Deployment's was most of what the operator
// allocated while WebApps were created. A record the watch beat (the
// event came before the answer) goes with the next event of the child.
type Sent struct{ m sync.Map }

type sentRecord struct{ resourceVersion, fingerprint string }

// Record keeps fingerprint for key's child at resourceVersion. A nil Sent
// keeps nothing.
func (s *Sent) Record(key types.NamespacedName, resourceVersion, fingerprint string) {
	if s != nil && resourceVersion != "" && fingerprint != "" {
		s.m.Store(key, sentRecord{resourceVersion, fingerprint})
	}
}

// Take returns the fingerprint recorded for key's child at resourceVersion,
// and forgets it; a record of an earlier version is forgotten too.
func (s *Sent) Take(key types.NamespacedName, resourceVersion string) (string, bool) {
	if s == nil {
		return "", false
	}
	v, ok := s.m.Load(key)
	if !ok {
		return "", false
	}
	rec := v.(sentRecord)
	cmp, err := resourceversion.CompareResourceVersion(resourceVersion, rec.resourceVersion)
	if err != nil || cmp >= 0 {
		s.m.CompareAndDelete(key, v)
	}
	return rec.fingerprint, err == nil && cmp == 0
}

// Forget drops key's record: its owner is gone.
func (s *Sent) Forget(key types.NamespacedName) {
	if s != nil {
		s.m.Delete(key)
	}
}
