package database

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/pki"
	"github.com/daytwo-dev/daytwo/internal/pooler"
)

// The pooler (spec.pooler): per pool, read-write and with readOnly
// read-only, a Deployment of PgBouncer pods, a Service and a
// PodDisruptionBudget, all named db.PoolerName; one Secret with the auth
// role's password (<db>-pooler) and one certificate for both Services
// (<db>-pooler-tls), from the Database's CA. Pool pods carry
// labelPooler, never labelDatabase: the Database's own selectors (its
// pods, its budgets) must not see them.
const (
	labelPooler        = "daytwo.dev/pooler"
	containerPgbouncer = "pgbouncer"
)

func poolerSecretName(db *v1alpha1.Database) string    { return db.Name + "-pooler" }
func poolerTLSSecretName(db *v1alpha1.Database) string { return db.Name + "-pooler-tls" }

// poolerHost is the read-write pool's name for clients.
func poolerHost(db *v1alpha1.Database) string {
	return db.PoolerName(false) + "." + db.Namespace + ".svc"
}

// poolerNames are the names the pools' certificate carries: both
// Services in every form a client in the cluster may use.
func poolerNames(db *v1alpha1.Database) []string {
	var names []string
	for _, svc := range []string{db.PoolerName(false), db.PoolerName(true)} {
		names = append(names, svc, svc+"."+db.Namespace, svc+"."+db.Namespace+".svc", svc+"."+db.Namespace+".svc.cluster.local")
	}
	return names
}

func poolerSelector(db *v1alpha1.Database, readOnly bool) map[string]string {
	return map[string]string{labelPooler: db.PoolerName(readOnly)}
}

func poolerPodLabels(db *v1alpha1.Database, readOnly bool) map[string]string {
	l := poolerSelector(db, readOnly)
	l["app.kubernetes.io/name"] = "pgbouncer"
	l["app.kubernetes.io/instance"] = db.Name
	l[controller.ManagedByLabel] = controller.ManagedBy
	return l
}

// poolerPhase keeps spec.pooler's objects, and removes them once the
// field is gone.
func (r *Reconciler) poolerPhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	if db.Spec.Pooler == nil {
		return r.removePooler(ctx, db, obs)
	}
	if why := db.PoolerProblem(); why != "" {
		obs.found.pooler = &v1alpha1.PoolerStatus{}
		obs.found.poolerCondition = &metav1.Condition{Type: v1alpha1.ConditionPoolerReady, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonInvalidSpec, Message: "spec.pooler: " + why}
		return stepResult{}, r.removePools(ctx, db, bothPools(db), false)
	}
	if msg, err := r.ensureSecret(ctx, db, poolerSecretName(db), func(pw string) map[string][]byte {
		return map[string][]byte{v1alpha1.CredentialsPassword: []byte(pw)}
	}); err != nil || msg != "" {
		obs.found.conflict = msg
		return stepResult{}, err
	}
	st, err := r.ensureIssued(ctx, db, obs, poolerTLSSecretName(db), poolerHost(db), poolerNames(db), "pooler certificate")
	if err != nil || st == nil {
		return stepResult{}, err
	}
	authErr := r.askPoolerAuth(ctx, db, obs)
	for _, readOnly := range []bool{false, true} {
		if readOnly && !db.Spec.Pooler.ReadOnly {
			if err := r.removePools(ctx, db, []string{db.PoolerName(true)}, false); err != nil {
				return stepResult{}, err
			}
			continue
		}
		if err := r.applyPool(ctx, db, obs, readOnly); err != nil {
			return stepResult{}, err
		}
	}
	ready, err := r.poolerStatus(ctx, db, obs, authErr)
	if err != nil || ready {
		return stepResult{}, err
	}
	return stepResult{requeue: rolesRetry}, nil
}

// askPoolerAuth makes the auth role and its function on the primary; an
// error is reported in the pooler's condition (the pods cannot log
// clients in meanwhile), never fails the reconcile.
func (r *Reconciler) askPoolerAuth(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	t, token, err := r.primaryTarget(ctx, db, obs)
	if err != nil {
		return err
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: poolerSecretName(db)}, s); err != nil {
		return fmt.Errorf("failed to get Secret %s: %w", poolerSecretName(db), err)
	}
	if err := r.Instances.PoolerAuth(ctx, t, token, instanceapi.PoolerAuthRequest{Password: string(s.Data[v1alpha1.CredentialsPassword])}); err != nil {
		return fmt.Errorf("the primary %s did not make the pooler's role: %w", obs.Primary, err)
	}
	return nil
}

// applyPool applies one pool's Deployment, Service and budget.
func (r *Reconciler) applyPool(ctx context.Context, db *v1alpha1.Database, obs *observation, readOnly bool) error {
	name := db.PoolerName(readOnly)
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[appsv1.Deployment](db.Namespace, name),
		r.poolDeployment(db, obs, readOnly), appsv1ac.ExtractDeployment, "Deployment "+name); err != nil {
		return err
	}
	svc := corev1ac.Service(name, db.Namespace).WithLabels(labels(db)).WithOwnerReferences(ownerReference(db)).
		WithSpec(corev1ac.ServiceSpec().WithSelector(poolerSelector(db, readOnly)).
			WithPorts(corev1ac.ServicePort().WithName("postgresql").WithPort(instanceapi.PostgresPort).
				WithTargetPort(intstr.FromString("postgresql")).WithProtocol(corev1.ProtocolTCP)))
	if err := controller.ApplyIfChanged(ctx, r.Client, controller.Named[corev1.Service](db.Namespace, name), svc,
		corev1ac.ExtractService, "Service "+name); err != nil {
		return err
	}
	pdb := policyv1ac.PodDisruptionBudget(name, db.Namespace).WithLabels(labels(db)).WithOwnerReferences(ownerReference(db)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(poolerSelector(db, readOnly))).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
	return controller.ApplyIfChanged(ctx, r.Client, controller.Named[policyv1.PodDisruptionBudget](db.Namespace, name), pdb,
		policyv1ac.ExtractPodDisruptionBudget, "PodDisruptionBudget "+name)
}

// removePooler removes the pools, then, once the primary made the auth
// role unable to log in, its Secrets (which say there is a role to
// disable).
func (r *Reconciler) removePooler(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	if err := r.removePools(ctx, db, bothPools(db), false); err != nil {
		return stepResult{}, err
	}
	secret := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, poolerSecretName(db))
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		return stepResult{}, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(secret, db) {
		return stepResult{}, nil // someone's own Secret of that name: no pool of ours
	}
	t, token, err := r.primaryTarget(ctx, db, obs)
	if err == nil {
		err = r.Instances.PoolerAuth(ctx, t, token, instanceapi.PoolerAuthRequest{Absent: true})
	}
	if err != nil {
		// Tried again: the role keeps its login until then.
		return stepResult{requeue: rolesRetry}, nil //nolint:nilerr // waits for the primary, as declared roles do
	}
	return stepResult{}, r.removePools(ctx, db, nil, true)
}

// removePools deletes the named pools' Deployments, Services and
// budgets, and with secrets the pools' Secrets.
func (r *Reconciler) removePools(ctx context.Context, db *v1alpha1.Database, names []string, secrets bool) error {
	for _, name := range names {
		for kind, obj := range map[string]client.Object{
			"Deployment": &appsv1.Deployment{}, "Service": &corev1.Service{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudget{},
		} {
			obj.SetNamespace(db.Namespace)
			obj.SetName(name)
			if err := controller.DeleteOwned(ctx, r.Client, db, obj, kind); err != nil {
				return err
			}
		}
	}
	if !secrets {
		return nil
	}
	// The auth role's Secret last: while it exists, removePooler comes
	// back to finish.
	for _, name := range []string{poolerTLSSecretName(db), poolerSecretName(db)} {
		if err := controller.DeleteOwned(ctx, r.Client, db, metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, name), "Secret"); err != nil {
			return err
		}
	}
	return nil
}

// bothPools are the names of a Database's two pools.
func bothPools(db *v1alpha1.Database) []string {
	return []string{db.PoolerName(false), db.PoolerName(true)}
}

// poolerFlags are a pool's `daytwo pooler run` flags.
func poolerFlags(db *v1alpha1.Database, readOnly bool) instanceapi.PoolerFlags {
	p := db.Spec.Pooler
	target := db.PrimaryHost()
	if readOnly {
		target = db.ReplicaHost()
	}
	return instanceapi.PoolerFlags{Target: target, PoolMode: string(p.PoolMode), DefaultPoolSize: int(ptr.Deref(p.DefaultPoolSize, 20)),
		MaxClientConn: int(ptr.Deref(p.MaxClientConnections, 1000))}
}

// poolDeployment is one pool's Deployment: PgBouncer pods spread across
// nodes and zones, each rolled only once its successor serves.
func (r *Reconciler) poolDeployment(db *v1alpha1.Database, obs *observation, readOnly bool) *appsv1ac.DeploymentApplyConfiguration {
	p := db.Spec.Pooler
	image := p.Image
	if image == "" {
		image = r.PoolerImage
	}
	sel := poolerSelector(db, readOnly)
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	if p.Resources != nil {
		res = *controller.WithMemoryLimit(p.Resources)
	}
	probe := func(period, failures int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath(instanceapi.PathPoolerReady).
			WithPort(intstr.FromString("api")).WithScheme(corev1.URISchemeHTTPS)).
			WithPeriodSeconds(period).WithTimeoutSeconds(3).WithFailureThreshold(failures)
	}
	secret := func(name string, items ...[2]string) *corev1ac.VolumeProjectionApplyConfiguration {
		src := corev1ac.SecretProjection().WithName(name)
		for _, it := range items {
			src.WithItems(corev1ac.KeyToPath().WithKey(it[0]).WithPath(it[1]))
		}
		return corev1ac.VolumeProjection().WithSecret(src)
	}
	container := corev1ac.Container().WithName(containerPgbouncer).WithImage(image).WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(instanceapi.Binary).
		WithArgs(append([]string{"pooler", "run"}, poolerFlags(db, readOnly).Args()...)...).
		WithPorts(corev1ac.ContainerPort().WithName("postgresql").WithContainerPort(instanceapi.PostgresPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("api").WithContainerPort(instanceapi.Port).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName(metricsPortName).WithContainerPort(instanceapi.MetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(probe(2, 2)).
		WithLivenessProbe(probe(10, 6)).
		WithResources(resourcesApply(res)).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("controller").WithMountPath(controllerMount),
			corev1ac.VolumeMount().WithName("secrets").WithMountPath(instanceapi.SecretsDir).WithReadOnly(true)).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError)
	served := obs.found.tls.secret
	if served == "" {
		served = serverTLSSecretName(db)
	}
	userLabels, userAnnotations := inherited(db)
	// The pools follow the instances to their node pool (not their
	// affinity: the pools keep apart from each other).
	spec := corev1ac.PodSpec()
	controller.Place(spec, ptr.Deref(db.Spec.Placement, v1alpha1.DatabasePlacement{}).Placement, db.Spec.ImagePullSecrets)
	return appsv1ac.Deployment(db.PoolerName(readOnly), db.Namespace).
		WithLabels(labels(db)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(ptr.Deref(p.Instances, 2)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().WithMaxUnavailable(intstr.FromInt32(0)).WithMaxSurge(intstr.FromInt32(1)))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(userLabels).WithLabels(poolerPodLabels(db, readOnly)).
				WithAnnotations(userAnnotations).
				WithAnnotations(map[string]string{"kubectl.kubernetes.io/default-container": containerPgbouncer}).
				WithSpec(spec.
					// PgBouncer's safe shutdown lets transactions finish.
					WithTerminationGracePeriodSeconds(30).
					WithEnableServiceLinks(false).
					// The pool needs nothing of the API server.
					WithAutomountServiceAccountToken(false).
					WithSecurityContext(corev1ac.PodSecurityContext().
						WithRunAsNonRoot(true).WithRunAsUser(65532).WithRunAsGroup(65532).WithFSGroup(65532).
						WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
					WithAffinity(corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
						WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().WithWeight(100).
							WithPodAffinityTerm(corev1ac.PodAffinityTerm().WithTopologyKey(corev1.LabelHostname).
								WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(sel)))))).
					WithTopologySpreadConstraints(corev1ac.TopologySpreadConstraint().WithMaxSkew(1).
						WithTopologyKey(corev1.LabelTopologyZone).WithWhenUnsatisfiable(corev1.ScheduleAnyway).
						WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(sel))).
					WithInitContainers(copyBinaryContainer(r.InstanceImage)).
					WithContainers(container).
					WithVolumes(
						corev1ac.Volume().WithName("controller").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
						corev1ac.Volume().WithName("secrets").WithProjected(corev1ac.ProjectedVolumeSource().
							WithDefaultMode(0o440).
							WithSources(
								secret(poolerSecretName(db), [2]string{v1alpha1.CredentialsPassword, pooler.SecretAuthPassword}),
								secret(poolerTLSSecretName(db), [2]string{pki.TLSCert, pooler.SecretTLSCert}, [2]string{pki.TLSKey, pooler.SecretTLSKey}),
								// PostgreSQL is verified against the CA it is served with.
								secret(served, [2]string{pki.CACert, pooler.SecretServerCA}),
								// The operator's client certificate, against the Database's CA.
								secret(caSecretName(db), [2]string{pki.CACert, pooler.SecretClientCA}),
							))))))
}

// poolerStatus records the pools' ready pods and condition; it says
// whether they are all ready.
func (r *Reconciler) poolerStatus(ctx context.Context, db *v1alpha1.Database, obs *observation, authErr error) (bool, error) {
	st := &v1alpha1.PoolerStatus{Host: poolerHost(db)}
	want := ptr.Deref(db.Spec.Pooler.Instances, 2)
	ready := authErr == nil
	var waiting []string
	for _, readOnly := range []bool{false, true} {
		if readOnly && !db.Spec.Pooler.ReadOnly {
			continue
		}
		d := &appsv1.Deployment{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.PoolerName(readOnly)}, d); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("failed to get Deployment %s: %w", db.PoolerName(readOnly), err)
		}
		n := d.Status.ReadyReplicas
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want {
			n = min(n, d.Status.UpdatedReplicas)
		}
		if readOnly {
			st.ReadOnlyReadyInstances = n
		} else {
			st.ReadyInstances = n
		}
		if n < want {
			ready = false
			waiting = append(waiting, fmt.Sprintf("%s has %d of %d pods ready", db.PoolerName(readOnly), n, want))
		}
	}
	obs.found.pooler = st
	cond := metav1.Condition{Type: v1alpha1.ConditionPoolerReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPoolerReady,
		Message: "PgBouncer serves at " + st.Host + ":" + strconv.Itoa(instanceapi.PostgresPort)}
	if !ready {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonPoolerProgressing
		if authErr != nil {
			waiting = append(waiting, authErr.Error())
		}
		cond.Message = controller.Truncate(fmt.Sprint(waiting), 1000)
	}
	obs.found.poolerCondition = &cond
	return ready, nil
}
