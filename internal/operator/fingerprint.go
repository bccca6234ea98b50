package operator

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"

	"github.com/daytwo-dev/daytwo/internal/controller"
)

// Most watch events of a Deployment are its status: the controller
// manager's, several per rollout. Extracting daytwo's part from each
// again (fingerprint) was two thirds of the operator's allocations while
// a thousand WebApps were created, and a third of its CPU went to the
// garbage collection that followed. The cache's copy therefore carries,
// beside the fingerprint, a digest of what the fingerprint was taken
// from (ownedSource); an event whose digest is the same keeps the copy's
// fingerprint, without extracting.

// ownedSource is the digest of everything daytwo's part of d is read
// from: which fields daytwo's entry covers (its managed fields), the
// object (its UID), its spec (as encoded: the generation would not do, as
// the API server keeps it when a quantity changes only its format, 1Gi to
// 1073741824) and its metadata (the labels and annotations daytwo's entry
// names, owner references and finalizers). A status update changes none of
// them, nor does the controller manager's revision annotation, which came
// with every new Deployment and cost a second extraction. "" when daytwo
// has no entry, or the spec cannot be encoded.
func ownedSource(d *appsv1.Deployment) string {
	i := slices.IndexFunc(d.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == controller.FieldOwner && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
	})
	if i < 0 || d.ManagedFields[i].FieldsV1 == nil {
		return ""
	}
	spec, err := d.Spec.Marshal()
	if err != nil {
		return ""
	}
	h := sha256.New()
	count := func(n int) { _ = binary.Write(h, binary.LittleEndian, uint64(n)) }
	field := func(s string) {
		count(len(s))
		h.Write([]byte(s))
	}
	flag := func(b *bool) { // unset, false and true apart
		switch {
		case b == nil:
			count(0)
		case !*b:
			count(1)
		default:
			count(2)
		}
	}
	owned := d.ManagedFields[i].FieldsV1.GetRawString()
	field(owned)
	field(string(spec))
	field(string(d.UID))
	writeMap(h, field, d.Labels, owned)
	writeMap(h, field, d.Annotations, owned)
	count(len(d.OwnerReferences))
	for _, o := range d.OwnerReferences {
		field(o.APIVersion)
		field(o.Kind)
		field(o.Name)
		field(string(o.UID))
		flag(o.Controller)
		flag(o.BlockOwnerDeletion)
	}
	count(len(d.Finalizers))
	for _, f := range d.Finalizers {
		field(f)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// writeMap writes to h, in key order, the entries of m whose key the
// managed fields owned name ("f:KEY"; a key that merely appears elsewhere
// is written too, which costs only an extraction), their count first.
func writeMap(h hash.Hash, field func(string), m map[string]string, owned string) {
	keys := slices.DeleteFunc(slices.Sorted(maps.Keys(m)), func(k string) bool {
		return !strings.Contains(owned, `"f:`+k+`"`)
	})
	_ = binary.Write(h, binary.LittleEndian, uint64(len(keys)))
	for _, k := range keys {
		field(k)
		field(m[k])
	}
}

// fingerprintDeployment replaces d's managed fields with the fingerprint
// of daytwo's part and the digest it was taken from. It keeps the
// fingerprint of previous (the cache's copy d replaces, nil if none) when
// the digests are the same.
func fingerprintDeployment(d *appsv1.Deployment, previous metav1.Object) {
	if len(d.ManagedFields) == 0 {
		return
	}
	src := ownedSource(d)
	if src != "" && previous != nil && previous.GetUID() == d.UID {
		if v := previous.GetAnnotations()[controller.CachedOwnedFingerprint]; strings.HasSuffix(v, "/"+src) {
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			d.Annotations[controller.CachedOwnedFingerprint] = v // the same string: shared, not copied
			d.SetManagedFields(nil)
			return
		}
	}
	fingerprint(d, appsv1ac.ExtractDeployment)
	if fp, ok := d.Annotations[controller.CachedOwnedFingerprint]; ok && src != "" {
		d.Annotations[controller.CachedOwnedFingerprint] = fp + "/" + src
	}
}
