package database

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// stsInputs are the facts the StatefulSet depends on beyond the spec.
type stsInputs struct {
	instanceImage string // the daytwo image the init container copies from
	image         string // the PostgreSQL image to run (the spec's, or the last good one after a rollback)
	major         string // the major version of the data
	goodImage     string
	failedImage   string
	runningParams string
	// claimSize keeps the live volume claim template: it is immutable, so a
	// resize goes to the PVCs instead.
	claimSize *resource.Quantity
	// restore is where bootstrap.fromBackup reads from; nil for initdb.
	restore *restoreSource
	// stopped: no instance runs, for a major upgrade's Job (upgrading is
	// "<from>-<to>"); failedUpgrade is the major whose upgrade failed.
	stopped                  bool
	upgrading, failedUpgrade string
}

// metricsPortName names the instance manager's /metrics port: the
// PodMonitor scrapes it.
const metricsPortName = "metrics"

func instancePorts() []*corev1ac.ContainerPortApplyConfiguration {
	return []*corev1ac.ContainerPortApplyConfiguration{
		corev1ac.ContainerPort().WithName("postgresql").WithContainerPort(instanceapi.PostgresPort).WithProtocol(corev1.ProtocolTCP),
		corev1ac.ContainerPort().WithName("status").WithContainerPort(instanceapi.Port).WithProtocol(corev1.ProtocolTCP),
		corev1ac.ContainerPort().WithName(metricsPortName).WithContainerPort(instanceapi.MetricsPort).WithProtocol(corev1.ProtocolTCP),
	}
}

// restoreSource is the storage of the DatabaseBackup a Database bootstraps
// from: daytwo flags, the S3 credentials' environment, a PVC's volume.
type restoreSource struct {
	// flags are the restore's: the storage, and a point-in-time
	// recovery's target.
	flags   instanceapi.RunFlags
	env     []corev1.EnvVar
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
}

// statefulSet is the PostgreSQL StatefulSet. OnDelete: the operator decides
// which pod restarts when (replicas first, then the primary).
func statefulSet(db *v1alpha1.Database, p plan, in stsInputs) *appsv1ac.StatefulSetApplyConfiguration {
	ann := map[string]string{annMajor: in.major}
	if in.goodImage != "" {
		ann[annGoodImage] = in.goodImage
	}
	if in.failedImage != "" {
		ann[annFailedImage] = in.failedImage
	}
	if in.runningParams != "" {
		ann[annRunningParameters] = in.runningParams
	}
	if in.upgrading != "" {
		ann[annUpgrading] = in.upgrading
	}
	if in.failedUpgrade != "" {
		ann[annUpgradeFailed] = in.failedUpgrade
	}
	replicas, whenScaled := p.instances, appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	if in.stopped {
		// Stopping every instance must not take their volumes with them:
		// the same update that scales to 0 retains the claims.
		replicas, whenScaled = 0, appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	size := p.storage
	if in.claimSize != nil {
		size = *in.claimSize
	}
	// The claim template is written as the API server stores it (no kind or
	// namespace, the defaulted volume mode and phase), so an unchanged
	// StatefulSet compares equal and is not applied again.
	claim := (&corev1ac.PersistentVolumeClaimApplyConfiguration{}).
		WithName(volumeData).
		WithLabels(selectorLabels(db)).
		WithSpec(corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithVolumeMode(corev1.PersistentVolumeFilesystem).
			WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: size}))).
		WithStatus(corev1ac.PersistentVolumeClaimStatus().WithPhase(corev1.ClaimPending))
	if p.storageClass != nil {
		claim.Spec.WithStorageClassName(*p.storageClass)
	}
	return appsv1ac.StatefulSet(db.Name, db.Namespace).
		WithLabels(labels(db)).
		WithAnnotations(ann).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(replicas).
			WithServiceName(headlessName(db)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(db))).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.OnDeleteStatefulSetStrategyType)).
			// The finalizer handles volumes on deletion (deletionPolicy); a
			// replica's volume removed by a scale-down is rebuilt by cloning.
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(appsv1.RetainPersistentVolumeClaimRetentionPolicyType).
				WithWhenScaled(whenScaled)).
			WithTemplate(podTemplate(db, p, in)).
			WithVolumeClaimTemplates(claim))
}

func podTemplate(db *v1alpha1.Database, p plan, in stsInputs) *corev1ac.PodTemplateSpecApplyConfiguration {
	ann := map[string]string{
		annRestartParameters:                      p.restartParameters(),
		"kubectl.kubernetes.io/default-container": containerPostgres,
	}
	if p.archive != nil {
		// Only then: a new key on every template would restart every
		// instance of every Database when the operator is upgraded.
		ann[annArchive] = p.archive.location
	}
	userLabels, userAnnotations := inherited(db)
	spec := corev1ac.PodSpec().
		WithTerminationGracePeriodSeconds(terminationGrace).
		WithEnableServiceLinks(false).
		// The instance manager reads and renews the primary Lease.
		WithServiceAccountName(instanceAccountName(db)).
		WithAutomountServiceAccountToken(true).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).WithRunAsUser(999).WithRunAsGroup(999).WithFSGroup(999).
			WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)))
	placeInstances(db, spec)
	return corev1ac.PodTemplateSpec().
		WithLabels(userLabels).WithLabels(labels(db)).
		WithAnnotations(userAnnotations).WithAnnotations(ann).
		WithSpec(spec.
			WithInitContainers(initContainers(db, p, in)...).
			WithContainers(postgresContainer(db, p, in)).
			WithVolumes(append(append(podVolumes(db, p), restoreVolumes(in.restore)...), archiveVolumes(p)...)...))
}

// runFlags are the postgres container's `instance run` flags.
func runFlags(db *v1alpha1.Database, in stsInputs) instanceapi.RunFlags {
	fl := instanceapi.RunFlags{TerminationLog: "/dev/termination-log", Cluster: db.Name, Pod: "$(POD_NAME)",
		Namespace: "$(POD_NAMESPACE)", Lease: leaseName(db), PrimaryHost: primaryHost(db),
		PGData: instanceapi.PGData, RunDir: instanceapi.RunDir, ShutdownTimeout: (terminationGrace - 10) * time.Second,
		DatabaseUID: string(db.UID), BootstrapSource: bootstrapSource(db), TLS: true,
		ReuseData: db.Annotations[v1alpha1.AnnotationReuseData] == "true", LeaseDuration: db.LeaseDuration()}
	if b := db.Spec.Bootstrap; b != nil && b.FromBackup != nil && in.restore != nil {
		// The storage is the restore init container's (restoreContainer).
		fl.FromBackup, fl.RestoreID = true, b.FromBackup.BackupID
	} else if b != nil && b.InitDB != nil {
		// A replica Database's too: its data is the source's, and its
		// application owner gets the password of its own Secret once
		// it is promoted.
		fl.Database, fl.Owner = db.AppDatabase()
	} else if b != nil && b.Import != nil {
		fl.ImportHost, fl.ImportPort, fl.ImportDatabases = b.Import.Host, int(b.Import.Port), b.Import.Databases
		fl.ImportRoles = b.Import.Roles == nil || *b.Import.Roles
	}
	return fl
}

func postgresContainer(db *v1alpha1.Database, p plan, in stsInputs) *corev1ac.ContainerApplyConfiguration {
	args := append([]string{"instance", "run"}, runFlags(db, in).Args()...)
	probe := func(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("status")).WithScheme(corev1.URISchemeHTTPS)).
			WithPeriodSeconds(period).WithTimeoutSeconds(3).WithFailureThreshold(failures)
	}
	return corev1ac.Container().
		WithName(containerPostgres).
		WithImage(in.image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(instanceapi.Binary).
		WithArgs(args...).
		WithEnv(append([]*corev1ac.EnvVarApplyConfiguration{
			corev1ac.EnvVar().WithName("POD_NAME").WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
			corev1ac.EnvVar().WithName("POD_NAMESPACE").WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.namespace"))),
			corev1ac.EnvVar().WithName("PGDATA").WithValue(instanceapi.PGData),
		}, importEnv(db)...)...).
		WithPorts(instancePorts()...).
		// Readiness moves the -rw Service: probe often, so a failover is
		// seen within a second of the promotion.
		WithReadinessProbe(probe(instanceapi.PathReadyz, 1, 2)).
		WithLivenessProbe(probe(instanceapi.PathHealthz, 10, 6)).
		WithResources(resourcesApply(p.resources)).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(volumeData).WithMountPath(dataMount),
			corev1ac.VolumeMount().WithName("controller").WithMountPath(controllerMount),
			corev1ac.VolumeMount().WithName("config").WithMountPath(instanceapi.ConfigDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("secrets").WithMountPath(instanceapi.SecretsDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("shm").WithMountPath("/dev/shm"),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		).
		WithVolumeMounts(archiveMounts(p)...).
		WithTerminationMessagePolicy(corev1.TerminationMessageReadFile)
}

// restoreContainer is the init container that restores a Database
// bootstrapped from a backup: the postgres container's command with
// --bootstrap-only, the storage's flags, credentials and volume. It is
// the only container that gets them, so PostgreSQL, and everything the
// running instance manager starts, never can read the backup storage's
// keys. With data in place it exits at once.
func restoreContainer(db *v1alpha1.Database, p plan, in stsInputs) *corev1ac.ContainerApplyConfiguration {
	c := postgresContainer(db, p, in)
	c.WithName(containerRestore)
	// The postgres container's flags, and the restore's.
	fl := runFlags(db, in)
	fl.BootstrapOnly = true
	fl.Restore, fl.RestorePhysical, fl.RecoveryTarget = in.restore.flags.Restore, in.restore.flags.RestorePhysical, in.restore.flags.RecoveryTarget
	c.Args = append([]string{"instance", "run"}, fl.Args()...)
	c.ReadinessProbe, c.LivenessProbe, c.StartupProbe, c.Lifecycle, c.Ports = nil, nil, nil, nil, nil
	return c.WithEnv(restoreEnv(in.restore)...).WithVolumeMounts(restoreMounts(in.restore)...)
}

// initContainers are the pod's: the instance manager's binary copied in,
// then, for a Database bootstrapped from a backup, its restore.
func initContainers(db *v1alpha1.Database, p plan, in stsInputs) []*corev1ac.ContainerApplyConfiguration {
	out := []*corev1ac.ContainerApplyConfiguration{copyBinaryContainer(in.instanceImage)}
	if in.restore != nil {
		out = append(out, restoreContainer(db, p, in))
	}
	return out
}

// copyBinaryContainer is the init container that copies the daytwo
// binary of image into the pod's "controller" volume, for the main
// container (an instance's, or a pool's) to run.
func copyBinaryContainer(image string) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(containerInit).
		WithImage(image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("/daytwo", "instance", "bootstrap", instanceapi.Binary).
		WithSecurityContext(restrictedContainer()).
		WithResources(corev1ac.ResourceRequirements().WithRequests(corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}).
			WithLimits(corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")})).
		WithVolumeMounts(corev1ac.VolumeMount().WithName("controller").WithMountPath(controllerMount))
}

// bootstrapSource names how db's spec bootstraps, as the instance manager
// records it in the data directory.
func bootstrapSource(db *v1alpha1.Database) string {
	if db.Spec.Replica != nil {
		return instanceapi.BootstrapReplica
	}
	if b := db.Spec.Bootstrap; b != nil && b.FromBackup != nil {
		return instanceapi.BootstrapFromBackup(b.FromBackup.BackupRef.Name)
	}
	if b := db.Spec.Bootstrap; b != nil && b.Import != nil {
		return instanceapi.BootstrapImport
	}
	return instanceapi.BootstrapInitDB
}

// importEnv passes bootstrap.import's credentials from their Secret.
// Optional: once imported, the pod must still start if the Secret goes.
func importEnv(db *v1alpha1.Database) []*corev1ac.EnvVarApplyConfiguration {
	b := db.Spec.Bootstrap
	if b == nil || b.Import == nil {
		return nil
	}
	ref := func(name, key string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().WithSecretKeyRef(
			corev1ac.SecretKeySelector().WithName(b.Import.CredentialsSecret.Name).WithKey(key).WithOptional(true)))
	}
	return []*corev1ac.EnvVarApplyConfiguration{ref(instanceapi.EnvImportUser, "username"), ref(instanceapi.EnvImportPassword, "password")}
}

// restoreEnv passes the backup storage's credentials. Optional: once
// restored, the pod must still start if that Secret goes away.
func restoreEnv(r *restoreSource) []*corev1ac.EnvVarApplyConfiguration {
	var out []*corev1ac.EnvVarApplyConfiguration
	for _, e := range restoreOrEmpty(r).env {
		ref := e.ValueFrom.SecretKeyRef
		out = append(out, corev1ac.EnvVar().WithName(e.Name).WithValueFrom(corev1ac.EnvVarSource().
			WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(ref.Name).WithKey(ref.Key).WithOptional(true))))
	}
	return out
}

// restoreVolumes are the restore storage's volumes: its claim, or the
// Secret of its S3 endpoint's private CA. The Secret is optional, like the
// credentials (restoreEnv): once restored, the pod must start without it.
func restoreVolumes(r *restoreSource) []*corev1ac.VolumeApplyConfiguration {
	var out []*corev1ac.VolumeApplyConfiguration
	for _, v := range restoreOrEmpty(r).volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, corev1ac.Volume().WithName(v.Name).WithPersistentVolumeClaim(
				corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(v.PersistentVolumeClaim.ClaimName).WithReadOnly(true)))
		case v.Secret != nil:
			src := corev1ac.SecretVolumeSource().WithSecretName(v.Secret.SecretName).WithOptional(true)
			for _, it := range v.Secret.Items {
				src.WithItems(corev1ac.KeyToPath().WithKey(it.Key).WithPath(it.Path))
			}
			out = append(out, corev1ac.Volume().WithName(v.Name).WithSecret(src))
		case v.Projected != nil:
			// A web identity's ServiceAccount token.
			out = append(out, controller.ApplyConfig[corev1ac.VolumeApplyConfiguration](&v))
		}
	}
	return out
}

func restoreMounts(r *restoreSource) []*corev1ac.VolumeMountApplyConfiguration {
	var out []*corev1ac.VolumeMountApplyConfiguration
	for _, m := range restoreOrEmpty(r).mounts {
		out = append(out, corev1ac.VolumeMount().WithName(m.Name).WithMountPath(m.MountPath).WithReadOnly(true))
	}
	return out
}

func restoreOrEmpty(r *restoreSource) *restoreSource {
	if r == nil {
		return &restoreSource{}
	}
	return r
}

func podVolumes(db *v1alpha1.Database, p plan) []*corev1ac.VolumeApplyConfiguration {
	// Parallel queries use /dev/shm; the runtime's 64MB default is too small.
	shm := resource.MustParse("256Mi")
	if m, ok := p.resources.Limits[corev1.ResourceMemory]; ok {
		shm = *resource.NewQuantity(m.Value()/4, resource.BinarySI)
	}
	return []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName("controller").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName("shm").WithEmptyDir(corev1ac.EmptyDirVolumeSource().
			WithMedium(corev1.StorageMediumMemory).WithSizeLimit(shm)),
		corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(configName(db))),
		corev1ac.Volume().WithName("secrets").WithProjected(corev1ac.ProjectedVolumeSource().
			WithDefaultMode(0o440).
			WithSources(
				corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(db.CredentialsSecretName()).
					WithItems(corev1ac.KeyToPath().WithKey(v1alpha1.CredentialsPassword).WithPath(instanceapi.SecretAppPassword))),
				corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(replicationName(db)).
					WithItems(corev1ac.KeyToPath().WithKey(v1alpha1.CredentialsPassword).WithPath(instanceapi.SecretReplicationPassword))),
				corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(apiSecretName(db)).
					WithItems(corev1ac.KeyToPath().WithKey(v1alpha1.CredentialsPassword).WithPath(instanceapi.SecretAPIToken))),
				corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(serverTLSSecretName(db)).
					WithItems(corev1ac.KeyToPath().WithKey(pki.TLSCert).WithPath(instanceapi.SecretTLSCert),
						corev1ac.KeyToPath().WithKey(pki.TLSKey).WithPath(instanceapi.SecretTLSKey),
						corev1ac.KeyToPath().WithKey(pki.CACert).WithPath(instanceapi.SecretTLSCA))),
				// The CA's certificate only: the instance API verifies the
				// operator's client certificate with it.
				corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(caSecretName(db)).
					WithItems(corev1ac.KeyToPath().WithKey(pki.CACert).WithPath(instanceapi.SecretAPIClientCA))),
			).WithSources(archiveSecrets(p)...).WithSources(sourceSecrets(p)...)),
	}
}

func restrictedContainer() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithAllowPrivilegeEscalation(false).
		WithReadOnlyRootFilesystem(true).
		WithRunAsNonRoot(true).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

func resourcesApply(r corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	out := corev1ac.ResourceRequirements()
	if len(r.Requests) > 0 {
		out.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		out.WithLimits(r.Limits)
	}
	return out
}
