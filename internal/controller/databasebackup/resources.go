package databasebackup

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

const (
	labelBackup       = "daytwo.dev/backup"
	labelScheduled    = "daytwo.dev/scheduled"
	annScheduledTime  = "daytwo.dev/scheduled-time"
	containerBackup   = "backup"
	controllerMount   = "/controller"
	backupVolumeMount = "/backups"
)

// DefaultActiveDeadline bounds a backup run whose spec sets no
// activeDeadlineSeconds: a stuck pg_dump (a lock, a hung connection) must
// not hold a Forbid schedule for good.
const DefaultActiveDeadline = 6 * time.Hour

// checkDeadline bounds a verification's check Job.
const checkDeadline = 10 * time.Minute

// resources are requests and limits for a container daytwo creates.
func resources(cpuRequest, memRequest, cpuLimit, memLimit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuRequest), corev1.ResourceMemory: resource.MustParse(memRequest)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLimit), corev1.ResourceMemory: resource.MustParse(memLimit)},
	}
}

// jobName is deterministic per scheduled time, so a stale cache cannot start
// a run twice: the second create fails with AlreadyExists. Names stay within
// 63 characters (the job-name pod label).
func jobName(b *v1alpha1.DatabaseBackup, scheduled time.Time) string {
	suffix := "-" + strconv.FormatInt(scheduled.Unix(), 10)
	name := b.Name
	if len(name)+len(suffix) > 63 {
		sum := sha256.Sum256([]byte(name))
		name = name[:63-len(suffix)-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return name + suffix
}

// SeriesPrefix is the storage prefix of one DatabaseBackup's backups:
// spec.storage.s3.prefix, else <namespace>/<name>. Restores use it too.
func SeriesPrefix(b *v1alpha1.DatabaseBackup) string {
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
		return "s3://" + endpoint + "/" + s3.Bucket + "/" + SeriesPrefix(b)
	}
	if pvc := b.Spec.Storage.PVC; pvc != nil {
		return "pvc://" + b.Namespace + "/" + pvc.ClaimName + "/" + backup.NormalizePrefix(pvc.Path) + SeriesPrefix(b)
	}
	return ""
}

// SeriesID is the series b's backups are stored under: spec.series, or its UID.
func SeriesID(b *v1alpha1.DatabaseBackup) string {
	if b.Spec.Series != "" {
		return b.Spec.Series
	}
	return string(b.UID)
}

// SeriesKeySecret is the Secret and key holding b's series key.
func SeriesKeySecret(b *v1alpha1.DatabaseBackup) (string, string) {
	if ref := b.Spec.SeriesKeySecretRef; ref != nil {
		return ref.Name, orDefault(ref.Key, seriesKeyKey)
	}
	return b.Name + "-series-key", seriesKeyKey
}

// seriesKeyKey is the Secret key of a series key by default.
const seriesKeyKey = "key"

// StorageArgs are the daytwo flags (with flagPrefix) that select the
// storage of b, the environment that carries its series key and S3
// credentials, and the volume a PVC storage needs.
func StorageArgs(b *v1alpha1.DatabaseBackup, flagPrefix string) ([]string, []corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	args := []string{"--" + flagPrefix + "prefix=" + SeriesPrefix(b), "--" + flagPrefix + "series-uid=" + SeriesID(b),
		"--" + flagPrefix + "series-name=" + b.Namespace + "/" + b.Name, "--" + flagPrefix + "database-name=" + b.Spec.DatabaseRef.Name,
		"--" + flagPrefix + "series-key-required"}
	keySecret, keyKey := SeriesKeySecret(b)
	env := []corev1.EnvVar{secretEnv(backup.SeriesKeyEnv, keySecret, keyKey)}
	if e := b.Spec.Encryption; e != nil {
		env = append(env, secretEnv(backup.EncryptionKeyEnv, e.KeySecretRef.Name, orDefault(e.KeySecretRef.Key, seriesKeyKey)))
	}
	st := b.Spec.Storage
	if s3 := st.S3; s3 != nil {
		args = append(args, "--"+flagPrefix+"s3-endpoint="+s3.Endpoint, "--"+flagPrefix+"s3-bucket="+s3.Bucket)
		if s3.Region != "" {
			args = append(args, "--"+flagPrefix+"s3-region="+s3.Region)
		}
		if s3.Insecure {
			args = append(args, "--"+flagPrefix+"s3-insecure")
		}
		ref := s3.CredentialsSecretRef
		env = append(env,
			secretEnv("AWS_ACCESS_KEY_ID", ref.Name, orDefault(ref.AccessKeyIDKey, "AWS_ACCESS_KEY_ID")),
			secretEnv("AWS_SECRET_ACCESS_KEY", ref.Name, orDefault(ref.SecretAccessKeyKey, "AWS_SECRET_ACCESS_KEY")),
		)
		if ca := s3.CASecretRef; ca != nil {
			// A volume of its own per storage (a restore's beside a run's).
			name, dir := flagPrefix+"s3-ca", s3CAMount+"/"+flagPrefix+"s3-ca"
			args = append(args, "--"+flagPrefix+"s3-ca-file="+dir+"/ca.crt")
			vol := corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ca.Name,
				Items: []corev1.KeyToPath{{Key: orDefault(ca.Key, "ca.crt"), Path: "ca.crt"}}}}}
			return args, env, []corev1.Volume{vol}, []corev1.VolumeMount{{Name: name, MountPath: dir, ReadOnly: true}}
		}
		return args, env, nil, nil
	}
	path := backupVolumeMount
	if st.PVC.Path != "" {
		path += "/" + st.PVC.Path
	}
	args = append(args, "--"+flagPrefix+"path="+path)
	vol := corev1.Volume{Name: "backups", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: st.PVC.ClaimName}}}
	return args, env, []corev1.Volume{vol}, []corev1.VolumeMount{{Name: "backups", MountPath: backupVolumeMount}}
}

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

// caMount holds the Database's CA (the credentials Secret's ca.crt) in a
// backup Job.
const caMount = "/etc/daytwo/ca"

// jobInputs are the facts a backup Job needs beyond the DatabaseBackup.
type jobInputs struct {
	image         string // the Database's PostgreSQL image (pg_dump matches the server)
	instanceImage string // the daytwo image the init container copies from
	credentials   string // the Database's credentials Secret
	// replication is the Database's replication Secret and primary the
	// host of its primary; replicas, when one streams, the host of its
	// replicas: a Physical run streams a base backup from a replica,
	// sparing the primary, or else from the primary.
	replication, primary, replicas string
}

// backupJob is the Job of the run scheduled at t.
func backupJob(b *v1alpha1.DatabaseBackup, in jobInputs, t time.Time) *batchv1.Job {
	args, env, vols, mounts := StorageArgs(b, "")
	args = append([]string{"backup", "run", "--id=" + backup.NewID(t)}, args...)
	if r := b.Spec.Retention; r != nil {
		args = append(args, fmt.Sprintf("--keep-last=%d", r.KeepLast), fmt.Sprintf("--keep-daily=%d", r.KeepDaily),
			fmt.Sprintf("--keep-weekly=%d", r.KeepWeekly), fmt.Sprintf("--keep-monthly=%d", r.KeepMonthly))
	}
	if b.Spec.Method == v1alpha1.BackupMethodPhysical {
		args = append(args, "--physical")
		if in.replicas != "" {
			args = append(args, "--switch-wal-host="+in.primary)
		}
		env = append(replicationEnv(in), env...)
	} else {
		if c := b.Spec.Compression; c != "" {
			args = append(args, "--compression="+string(c))
		}
		if l := b.Spec.CompressionLevel; l != nil {
			args = append(args, fmt.Sprintf("--compression-level=%d", *l))
		}
		env = append(libpqEnv(in.credentials), env...)
		if in.replication != "" {
			// The roles' password verifiers, which the owner may not read.
			args = append(args, "--roles-user="+instanceapi.ReplicationUser)
			env = append(env, secretEnv(backup.RolesPasswordEnv, in.replication, v1alpha1.CredentialsPassword))
		}
	}
	// Both verify the server: TLS with its name, against the Database's CA.
	env = append(env, corev1.EnvVar{Name: "PGSSLMODE", Value: "verify-full"},
		corev1.EnvVar{Name: "PGSSLROOTCERT", Value: caMount + "/" + v1alpha1.CredentialsCA})
	labels := map[string]string{
		labelBackup: b.Name, labelScheduled: strconv.FormatInt(t.Unix(), 10),
		"app.kubernetes.io/name": "daytwo-backup", "app.kubernetes.io/instance": b.Name, "app.kubernetes.io/managed-by": "daytwo",
	}
	pod := corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		SecurityContext:              podSecurity(),
		InitContainers: []corev1.Container{{
			Name: "bootstrap-controller", Image: in.instanceImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{"/daytwo", "instance", "bootstrap", controllerMount + "/daytwo"},
			SecurityContext: restricted(),
			Resources:       resources("10m", "32Mi", "500m", "128Mi"),
			VolumeMounts:    []corev1.VolumeMount{{Name: "controller", MountPath: controllerMount}},
		}},
		Containers: []corev1.Container{{
			Name: containerBackup, Image: in.image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{controllerMount + "/daytwo"}, Args: args, Env: env,
			SecurityContext:          restricted(),
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			// Two 64MiB upload parts in flight, pg_dump and the Go runtime.
			Resources: resources("100m", "256Mi", "1", "1Gi"),
			VolumeMounts: append([]corev1.VolumeMount{
				{Name: "controller", MountPath: controllerMount}, {Name: "tmp", MountPath: "/tmp"},
				{Name: "ca", MountPath: caMount, ReadOnly: true}}, mounts...),
		}},
		Volumes: append([]corev1.Volume{
			{Name: "controller", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: in.credentials,
				Items: []corev1.KeyToPath{{Key: v1alpha1.CredentialsCA, Path: v1alpha1.CredentialsCA}}}}},
		}, vols...),
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: jobName(b, t), Namespace: b.Namespace, Labels: labels,
			Annotations: map[string]string{annScheduledTime: t.UTC().Format(time.RFC3339)},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(ptr.Deref(b.Spec.BackoffLimit, 2)),
			ActiveDeadlineSeconds: ptr.To(ptr.Deref(b.Spec.ActiveDeadlineSeconds, int64(DefaultActiveDeadline.Seconds()))),
			Template:              corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

// libpqEnv reaches the Database whose credentials Secret is named, as
// libpq variables from Secret references: the password is never in the spec.
func libpqEnv(credentials string) []corev1.EnvVar {
	return []corev1.EnvVar{
		secretEnv("PGHOST", credentials, v1alpha1.CredentialsHost),
		secretEnv("PGPORT", credentials, v1alpha1.CredentialsPort),
		secretEnv("PGUSER", credentials, v1alpha1.CredentialsUser),
		secretEnv("PGPASSWORD", credentials, v1alpha1.CredentialsPassword),
		secretEnv("PGDATABASE", credentials, v1alpha1.CredentialsDatabase),
		{Name: "HOME", Value: "/tmp"},
	}
}

// replicationEnv reaches a replica of the Database, or its primary, as its replication role,
// the password from a Secret reference. With replicas, libpq tries their
// Service first and the primary's after: a replica that restarts while
// the Job starts (a rolling change) costs the primary one base backup,
// not the run.
func replicationEnv(in jobInputs) []corev1.EnvVar {
	host := in.primary
	if in.replicas != "" {
		host = in.replicas + "," + in.primary
	}
	return []corev1.EnvVar{
		{Name: "PGHOST", Value: host},
		{Name: "PGPORT", Value: strconv.Itoa(instanceapi.PostgresPort)},
		{Name: "PGUSER", Value: instanceapi.ReplicationUser},
		secretEnv("PGPASSWORD", in.replication, v1alpha1.CredentialsPassword),
		{Name: "HOME", Value: "/tmp"},
	}
}

// podSecurity is the restricted pod security context, uid 999 as in the
// official postgres image.
func podSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), FSGroup: ptr.To[int64](999),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
