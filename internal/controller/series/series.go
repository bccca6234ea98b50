package series

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// volumeMount is where a PVC storage is mounted in a backup Job or an
// instance's restore.
const volumeMount = "/backups"

// SecretEnv is the environment variable name, read from key of Secret secret.
func SecretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

// Prefix is the storage prefix of one DatabaseBackup's backups:
// spec.storage.s3.prefix, else <namespace>/<name>. Restores use it too.
func Prefix(b *v1alpha1.DatabaseBackup) string {
	if s3 := b.Spec.Storage.S3; s3 != nil && s3.Prefix != "" {
		return backup.NormalizePrefix(s3.Prefix)
	}
	return backup.NormalizePrefix(b.Namespace + "/" + b.Name)
}

// Location identifies where b stores its backups, across namespaces for
// S3 (a bucket is global) and within b's namespace for a volume.
func Location(b *v1alpha1.DatabaseBackup) string {
	if s3 := b.Spec.Storage.S3; s3 != nil {
		endpoint := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s3.Endpoint, "https://"), "http://"))
		return "s3://" + endpoint + "/" + s3.Bucket + "/" + Prefix(b)
	}
	if pvc := b.Spec.Storage.PVC; pvc != nil {
		return "pvc://" + b.Namespace + "/" + pvc.ClaimName + "/" + backup.NormalizePrefix(pvc.Path) + Prefix(b)
	}
	return ""
}

// ID is the series b's backups are stored under: spec.series, or its UID.
func ID(b *v1alpha1.DatabaseBackup) string {
	if b.Spec.Series != "" {
		return b.Spec.Series
	}
	return string(b.UID)
}

// KeySecret is the Secret and key holding b's series key.
func KeySecret(b *v1alpha1.DatabaseBackup) (string, string) {
	if ref := b.Spec.SeriesKeySecretRef; ref != nil {
		return ref.Name, cmp.Or(ref.Key, KeyKey)
	}
	return b.Name + "-series-key", KeyKey
}

// KeyKey is the Secret key of a series key (and of an encryption key) by default.
const KeyKey = "key"

// Storage is what selects the storage of b: the daytwo flags, the
// environment that carries its series key and S3 credentials, and the
// volume a PVC storage or a private CA needs (a CA's volume is named with
// volumePrefix, so a restore's sits beside a run's).
func Storage(b *v1alpha1.DatabaseBackup, volumePrefix string) (instanceapi.StorageFlags, []corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	flags := instanceapi.StorageFlags{Prefix: Prefix(b), SeriesUID: ID(b), SeriesName: b.Namespace + "/" + b.Name,
		Database: b.Spec.DatabaseRef.Name, KeyRequired: true}
	keySecret, keyKey := KeySecret(b)
	env := []corev1.EnvVar{SecretEnv(backup.SeriesKeyEnv, keySecret, keyKey)}
	if e := b.Spec.Encryption; e != nil {
		env = append(env, SecretEnv(backup.EncryptionKeyEnv, e.KeySecretRef.Name, cmp.Or(e.KeySecretRef.Key, KeyKey)))
	}
	st := b.Spec.Storage
	if s3 := st.S3; s3 != nil {
		flags.Endpoint, flags.Bucket, flags.Region, flags.Insecure = s3.Endpoint, s3.Bucket, s3.Region, s3.Insecure
		flags.S3Access = S3Access(s3, "")
		if ref := s3.CredentialsSecretRef; ref != nil {
			env = append(env,
				SecretEnv("AWS_ACCESS_KEY_ID", ref.Name, cmp.Or(ref.AccessKeyIDKey, "AWS_ACCESS_KEY_ID")),
				SecretEnv("AWS_SECRET_ACCESS_KEY", ref.Name, cmp.Or(ref.SecretAccessKeyKey, "AWS_SECRET_ACCESS_KEY")),
			)
		}
		var vols []corev1.Volume
		var mounts []corev1.VolumeMount
		// Volumes of their own per storage (a restore's beside a run's).
		if wi := s3.WebIdentity; wi != nil {
			name, dir := volumePrefix+"s3-token", s3CAMount+"/"+volumePrefix+"s3-token"
			flags.WebIdentityTokenFile = dir + "/token"
			vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To[int32](0o644), Sources: []corev1.VolumeProjection{{ServiceAccountToken: TokenProjection(wi, "token")}}}}})
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: dir, ReadOnly: true})
		}
		if ca := s3.CASecretRef; ca != nil {
			name, dir := volumePrefix+"s3-ca", s3CAMount+"/"+volumePrefix+"s3-ca"
			flags.CAFile = dir + "/ca.crt"
			vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ca.Name,
				Items: []corev1.KeyToPath{{Key: cmp.Or(ca.Key, "ca.crt"), Path: "ca.crt"}}}}})
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: dir, ReadOnly: true})
		}
		return flags, env, vols, mounts
	}
	flags.Path = volumeMount
	if st.PVC.Path != "" {
		flags.Path += "/" + st.PVC.Path
	}
	vol := corev1.Volume{Name: "backups", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: st.PVC.ClaimName}}}
	return flags, env, []corev1.Volume{vol}, []corev1.VolumeMount{{Name: "backups", MountPath: volumeMount}}
}

// S3Access is how s3 is reached beyond static keys: the web identity's
// role and STS (its token at tokenFile), and the encryption asked for.
func S3Access(s3 *v1alpha1.S3Storage, tokenFile string) instanceapi.S3Access {
	var a instanceapi.S3Access
	if wi := s3.WebIdentity; wi != nil {
		a.RoleARN, a.STSEndpoint, a.WebIdentityTokenFile = wi.RoleARN, wi.STSEndpoint, tokenFile
	}
	if e := s3.ServerSideEncryption; e != nil {
		a.SSE, a.SSEKMSKeyID = e.Algorithm, e.KMSKeyID
	}
	return a
}

// TokenProjection is the ServiceAccount token of a web identity, at path
// in its volume. An hour's token; the kubelet renews it at 80%, and the
// storage reads it again at each renewal of its credentials.
func TokenProjection(wi *v1alpha1.S3WebIdentity, path string) *corev1.ServiceAccountTokenProjection {
	return &corev1.ServiceAccountTokenProjection{Audience: cmp.Or(wi.Audience, "sts.amazonaws.com"),
		ExpirationSeconds: ptr.To[int64](3600), Path: path}
}

// AudienceProblem says why b's web identity may not be used, or "": a
// token of an audience the API server accepts (apiAudiences, and the
// defaults every cluster uses) would be an API token of the Database's
// ServiceAccount, handed to whatever STS endpoint the spec names.
func AudienceProblem(b *v1alpha1.DatabaseBackup, apiAudiences []string) string {
	s3 := b.Spec.Storage.S3
	if s3 == nil || s3.WebIdentity == nil {
		return ""
	}
	aud := cmp.Or(s3.WebIdentity.Audience, "sts.amazonaws.com")
	if slices.Contains(apiAudiences, aud) || slices.Contains(defaultAPIAudiences, aud) {
		return fmt.Sprintf("spec.storage.s3.webIdentity.audience %q is an audience of the Kubernetes API server: "+
			"a token of it would be an API token, not a storage one", aud)
	}
	return ""
}

var defaultAPIAudiences = []string{"api", "kubernetes", "https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local"}

// NeedsIdentity is true when b's storage is reached with the pods' own
// identity (a web identity token, or the environment's credentials),
// not static keys: its pods then run as the Database's ServiceAccount.
func NeedsIdentity(b *v1alpha1.DatabaseBackup) bool {
	s3 := b.Spec.Storage.S3
	return s3 != nil && s3.CredentialsSecretRef == nil
}

// ServiceAccountName is the ServiceAccount a Database's instances run as.
func ServiceAccountName(database string) string { return database + "-instance" }

// PhysicalOf returns the Physical DatabaseBackups of the Database named
// db among backups, the one that archives its WAL first: the oldest, then
// by name. The others take no base backups (their storage gets no WAL).
func PhysicalOf(backups []v1alpha1.DatabaseBackup, db string) []v1alpha1.DatabaseBackup {
	out := slices.DeleteFunc(slices.Clone(backups), func(b v1alpha1.DatabaseBackup) bool {
		return b.Spec.Method != v1alpha1.BackupMethodPhysical || b.Spec.DatabaseRef.Name != db || !b.DeletionTimestamp.IsZero()
	})
	slices.SortFunc(out, func(a, b v1alpha1.DatabaseBackup) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return out
}

// s3CAMount holds a private CA of the S3 endpoint (S3Storage.caSecretRef).
const s3CAMount = "/etc/daytwo"
