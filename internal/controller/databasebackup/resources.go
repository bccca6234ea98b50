package databasebackup

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

const (
	labelBackup      = "daytwo.dev/backup"
	labelScheduled   = "daytwo.dev/scheduled"
	annScheduledTime = "daytwo.dev/scheduled-time"
	containerBackup  = "backup"
	controllerMount  = "/controller"
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
	// shape is how the Database's pods are placed and labelled: the
	// Job's pod follows its node pool, pull Secrets and metadata.
	shape podShape
}

// podShape is what a backup Job's pod takes from its Database's spec.
type podShape struct {
	placement   v1alpha1.Placement
	pullSecrets []corev1.LocalObjectReference
	metadata    v1alpha1.PodMetadata
}

func shapeOf(db *v1alpha1.Database) podShape {
	var s podShape
	if p := db.Spec.Placement; p != nil {
		s.placement = p.Placement
	}
	if m := db.Spec.InheritedMetadata; m != nil {
		s.metadata = *m
	}
	s.pullSecrets = db.Spec.ImagePullSecrets
	return s
}

// shape places pod as the Database's pods are (their node pool, node
// affinity and pull Secrets) and gives it their annotations. Not their
// labels: what selects the Database's pods by them must not find a Job's.
func (s podShape) shape(pod *corev1.PodSpec, meta *metav1.ObjectMeta) {
	pod.NodeSelector, pod.Tolerations, pod.PriorityClassName = s.placement.NodeSelector, s.placement.Tolerations, s.placement.PriorityClassName
	if a := s.placement.Affinity; a != nil && a.NodeAffinity != nil {
		pod.Affinity = &corev1.Affinity{NodeAffinity: a.NodeAffinity.DeepCopy()}
	}
	pod.ImagePullSecrets = s.pullSecrets
	if len(s.metadata.Annotations) > 0 {
		meta.Annotations = maps.Clone(s.metadata.Annotations)
	}
}

// backupJob is the Job of the run scheduled at t.
func backupJob(b *v1alpha1.DatabaseBackup, in jobInputs, t time.Time) *batchv1.Job {
	storage, env, vols, mounts := series.Storage(b, "")
	fl := backup.RunFlags{Storage: storage, ID: backup.NewID(t)}
	if r := b.Spec.Retention; r != nil {
		fl.Retention = backup.Retention{KeepLast: int(r.KeepLast), KeepDaily: int(r.KeepDaily), KeepWeekly: int(r.KeepWeekly),
			KeepMonthly: int(r.KeepMonthly)}
	}
	if b.Spec.Method == v1alpha1.BackupMethodPhysical {
		fl.Physical = true
		if in.replicas != "" {
			fl.SwitchWALHost = in.primary
		}
		env = append(replicationEnv(in), env...)
	} else {
		fl.Compression.Algorithm = string(b.Spec.Compression)
		if l := b.Spec.CompressionLevel; l != nil {
			fl.Compression.Level = int(*l)
		}
		env = append(libpqEnv(in.credentials), env...)
		if in.replication != "" {
			// The roles' password verifiers, which the owner may not read.
			fl.RolesUser = instanceapi.ReplicationUser
			env = append(env, series.SecretEnv(backup.RolesPasswordEnv, in.replication, v1alpha1.CredentialsPassword))
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
			Command: []string{controllerMount + "/daytwo"}, Args: append([]string{"backup", "run"}, fl.Args()...), Env: env,
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
	if series.NeedsIdentity(b) {
		// The storage is reached as the Database's ServiceAccount (a web
		// identity token, or what a cloud's webhook injects for it); the
		// API token stays unmounted.
		pod.ServiceAccountName = series.ServiceAccountName(b.Spec.DatabaseRef.Name)
	}
	podMeta := metav1.ObjectMeta{Labels: labels}
	in.shape.shape(&pod, &podMeta)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: jobName(b, t), Namespace: b.Namespace, Labels: labels,
			Annotations: map[string]string{annScheduledTime: t.UTC().Format(time.RFC3339)},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(ptr.Deref(b.Spec.BackoffLimit, 2)),
			ActiveDeadlineSeconds: ptr.To(ptr.Deref(b.Spec.ActiveDeadlineSeconds, int64(DefaultActiveDeadline.Seconds()))),
			Template:              corev1.PodTemplateSpec{ObjectMeta: podMeta, Spec: pod},
		},
	}
}

// libpqEnv reaches the Database whose credentials Secret is named, as
// libpq variables from Secret references: the password is never in the spec.
func libpqEnv(credentials string) []corev1.EnvVar {
	return []corev1.EnvVar{
		series.SecretEnv("PGHOST", credentials, v1alpha1.CredentialsHost),
		series.SecretEnv("PGPORT", credentials, v1alpha1.CredentialsPort),
		series.SecretEnv("PGUSER", credentials, v1alpha1.CredentialsUser),
		series.SecretEnv("PGPASSWORD", credentials, v1alpha1.CredentialsPassword),
		series.SecretEnv("PGDATABASE", credentials, v1alpha1.CredentialsDatabase),
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
		series.SecretEnv("PGPASSWORD", in.replication, v1alpha1.CredentialsPassword),
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
