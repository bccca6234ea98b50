package webapp

import (
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
)

const (
	// fieldOwner is daytwo's server-side apply field manager.
	fieldOwner = controller.FieldOwner
	// containerName is the name of the app container in every pod.
	containerName = "app"
	// labelWebApp selects a WebApp's pods; it is the only selector label, so
	// adding labels later never touches the immutable Deployment selector.
	labelWebApp = "daytwo.dev/webapp"
	// annotationConfigHash on the pod template changes when referenced config does.
	annotationConfigHash = "daytwo.dev/config-hash"
	// annotationTemplateHash on the pod template identifies the spec revision it came from.
	annotationTemplateHash = "daytwo.dev/template-hash"
	// annotationFailedTemplate on the Deployment names the spec revision that
	// missed its progress deadline (revisionOf); it is not applied again
	// until the spec changes.
	annotationFailedTemplate = "daytwo.dev/failed-template-hash"
)

// selectorLabels select the pods of app.
func selectorLabels(app *v1alpha1.WebApp) map[string]string {
	return map[string]string{labelWebApp: app.Name}
}

// labels go on every child of app.
func labels(app *v1alpha1.WebApp) map[string]string {
	l := map[string]string{
		"app.kubernetes.io/name":  app.Name,
		controller.ManagedByLabel: controller.ManagedBy,
	}
	maps.Copy(l, selectorLabels(app))
	return l
}

// ownerReference makes app the controller of a child, so garbage collection
// removes the child with it.
func ownerReference(app *v1alpha1.WebApp) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind("WebApp").
		WithName(app.Name).WithUID(app.UID).
		WithController(true).WithBlockOwnerDeletion(true)
}

// desiredReplicas is the fixed replica count, or nil when the HPA owns it.
func desiredReplicas(app *v1alpha1.WebApp) *int32 {
	if a := app.Spec.Autoscaling; a != nil {
		if app.Spec.Replicas == nil {
			return nil // not set yet: the running count stays (seedReplicas)
		}
		return ptr.To(min(max(*app.Spec.Replicas, a.MinReplicas, 1), a.MaxReplicas))
	}
	return ptr.To(ptr.Deref(app.Spec.Replicas, 1))
}

// maxReplicas is the most pods app can run.
func maxReplicas(app *v1alpha1.WebApp) int32 {
	if a := app.Spec.Autoscaling; a != nil {
		return a.MaxReplicas
	}
	return ptr.Deref(app.Spec.Replicas, 1)
}

// podInputs are what the children depend on beyond the spec.
type podInputs struct {
	// selector selects the pods: selectorLabels(app), or the immutable
	// selector of an adopted Deployment.
	selector map[string]string
	// configHash covers every referenced ConfigMap and Secret.
	configHash string
	// databaseSecret is the credentials Secret of spec.databaseRef, if
	// any; databasePooler says the app connects through the pool.
	databaseSecret string
	databasePooler bool
	// databaseHold says why a rollout waits for that Database, if it must.
	databaseHold string
}

// failure is a revision that failed: a rollout that missed its progress
// deadline, or an aborted canary and its signal. Recorded on the stable
// Deployment, it is not applied again until the spec changes.
type failure struct {
	revision, signal string
}

// deployment is the desired Deployment of app running template: the spec's
// template, or the last good one after a rollback or an aborted canary.
// failed, when set, records the spec revision that failed. paused holds a
// rollout under way (see databaseHold).
func deployment(app *v1alpha1.WebApp, sel map[string]string, template *corev1ac.PodTemplateSpecApplyConfiguration, failed failure, paused bool) *appsv1ac.DeploymentApplyConfiguration {
	spec := appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
		WithRevisionHistoryLimit(10).
		WithProgressDeadlineSeconds(progressDeadline(app)).
		WithStrategy(rollingUpdate(app)).
		WithTemplate(template)
	if r := desiredReplicas(app); r != nil {
		spec.WithReplicas(*r)
	}
	if paused {
		spec.WithPaused(true)
	}
	d := appsv1ac.Deployment(app.Name, app.Namespace).
		WithLabels(labels(app)).
		WithOwnerReferences(ownerReference(app)).
		WithSpec(spec)
	if failed.revision != "" {
		d.WithAnnotations(map[string]string{annotationFailedTemplate: failed.revision})
	}
	if failed.signal != "" {
		d.WithAnnotations(map[string]string{annotationCanaryAborted: failed.signal})
	}
	return d
}

func progressDeadline(app *v1alpha1.WebApp) int32 {
	if r := app.Spec.Rollout; r != nil && r.ProgressDeadlineSeconds > 0 {
		return r.ProgressDeadlineSeconds
	}
	return 600
}

func rollingUpdate(app *v1alpha1.WebApp) *appsv1ac.DeploymentStrategyApplyConfiguration {
	ru := appsv1ac.RollingUpdateDeployment().
		WithMaxSurge(intstr.FromString("25%")).
		WithMaxUnavailable(intstr.FromInt32(0))
	if r := app.Spec.Rollout; r != nil {
		if r.MaxSurge != nil {
			ru.WithMaxSurge(*r.MaxSurge)
		}
		if r.MaxUnavailable != nil {
			ru.WithMaxUnavailable(*r.MaxUnavailable)
		}
	}
	return appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType).WithRollingUpdate(ru)
}

// podTemplate is the pod template the spec asks for, annotated with the hash
// of its own content so a failed revision can be recognised later.
func podTemplate(app *v1alpha1.WebApp, in podInputs) *corev1ac.PodTemplateSpecApplyConfiguration {
	c := container(app, in)
	spec := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		// Most apps never call the Kubernetes API: no token unless asked.
		WithAutomountServiceAccountToken(ptr.Deref(app.Spec.AutomountServiceAccountToken, false)).
		WithSecurityContext(controller.Overlay[corev1ac.PodSecurityContextApplyConfiguration](&corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}, app.Spec.PodSecurityContext))
	if app.Spec.ServiceAccountName != "" {
		spec.WithServiceAccountName(app.Spec.ServiceAccountName)
	}
	databaseCA(spec, c, in)
	shapePod(app, spec, c)
	meta := ptr.Deref(app.Spec.PodMetadata, v1alpha1.PodMetadata{})
	t := corev1ac.PodTemplateSpec().
		WithLabels(meta.Labels).
		WithLabels(labels(app)).
		WithLabels(in.selector).
		WithAnnotations(meta.Annotations).
		WithAnnotations(map[string]string{annotationConfigHash: in.configHash}).
		WithSpec(spec.WithContainers(c))
	t.WithAnnotations(map[string]string{annotationTemplateHash: hashOf(t)})
	return t
}

// preStopSeconds is how long a stopping pod keeps serving before its
// container is signalled: the time for its endpoint's removal to reach
// every node.
const preStopSeconds = 5

func container(app *v1alpha1.WebApp, in podInputs) *corev1ac.ContainerApplyConfiguration {
	c := corev1ac.Container().
		WithName(containerName).
		WithImage(app.Spec.Image).
		WithImagePullPolicy(pullPolicy(app)).
		WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(app.Spec.Port).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(controller.ApplyConfigs[corev1ac.EnvVarApplyConfiguration](env(app, in))...).
		WithEnvFrom(controller.ApplyConfigs[corev1ac.EnvFromSourceApplyConfiguration](app.Spec.EnvFrom)...).
		WithResources(controller.ApplyConfig[corev1ac.ResourceRequirementsApplyConfiguration](resources(app))).
		WithReadinessProbe(probe(app, func(p *v1alpha1.WebAppProbes) *corev1.Probe { return p.Readiness }, readinessProbe())).
		WithLivenessProbe(probe(app, func(p *v1alpha1.WebAppProbes) *corev1.Probe { return p.Liveness }, livenessProbe())).
		// The container's last log lines stand in for a termination
		// message it did not write, so a crash explains itself in the
		// WebApp's conditions (see diagnose).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		// A pod being replaced keeps serving while kube-proxy and the
		// ingress take it out of the Service; stopped at once, requests
		// sent to it meanwhile hang or fail.
		WithLifecycle(corev1ac.Lifecycle().WithPreStop(corev1ac.LifecycleHandler().
			WithSleep(corev1ac.SleepAction().WithSeconds(preStopSeconds)))).
		WithSecurityContext(controller.Overlay[corev1ac.SecurityContextApplyConfiguration](&corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}, app.Spec.SecurityContext))
	if len(app.Spec.Command) > 0 {
		c.WithCommand(app.Spec.Command...)
	}
	if len(app.Spec.Args) > 0 {
		c.WithArgs(app.Spec.Args...)
	}
	if p := app.Spec.Probes; p != nil && p.Startup != nil {
		c.WithStartupProbe(controller.ApplyConfig[corev1ac.ProbeApplyConfiguration](p.Startup))
	}
	return c
}

func pullPolicy(app *v1alpha1.WebApp) corev1.PullPolicy {
	if app.Spec.ImagePullPolicy == "" {
		return corev1.PullIfNotPresent
	}
	return app.Spec.ImagePullPolicy
}

// env is the spec's env plus, with a databaseRef, the connection variables
// from the Database's credentials Secret.
func env(app *v1alpha1.WebApp, in podInputs) []corev1.EnvVar {
	out := append([]corev1.EnvVar{{Name: "PORT", Value: fmt.Sprint(app.Spec.Port)}}, app.Spec.Env...)
	if in.databaseSecret == "" {
		return out
	}
	uri, host := v1alpha1.CredentialsURI, v1alpha1.CredentialsHost
	if in.databasePooler {
		uri, host = v1alpha1.CredentialsPoolerURI, v1alpha1.CredentialsPoolerHost
	}
	for _, kv := range [][2]string{
		{"DATABASE_URL", uri}, {"PGHOST", host}, {"PGPORT", v1alpha1.CredentialsPort},
		{"PGDATABASE", v1alpha1.CredentialsDatabase}, {"PGUSER", v1alpha1.CredentialsUser}, {"PGPASSWORD", v1alpha1.CredentialsPassword},
	} {
		out = append(out, corev1.EnvVar{Name: kv[0], ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: in.databaseSecret}, Key: kv[1]}}})
	}
	// libpq, pgx and most drivers read these: the app verifies the server
	// with no step of its own.
	return append(out, corev1.EnvVar{Name: "PGSSLMODE", Value: "verify-full"},
		corev1.EnvVar{Name: "PGSSLROOTCERT", Value: databaseCAMount + "/" + v1alpha1.CredentialsCA})
}

// databaseCAMount holds the Database's CA (the credentials Secret's
// ca.crt) in a WebApp's pods with a databaseRef.
const databaseCAMount = "/etc/daytwo/database"

// databaseCA mounts the Database's CA, with a databaseRef.
func databaseCA(t *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration, in podInputs) {
	if in.databaseSecret == "" {
		return
	}
	t.WithVolumes(corev1ac.Volume().WithName("database-ca").WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(in.databaseSecret).
		WithItems(corev1ac.KeyToPath().WithKey(v1alpha1.CredentialsCA).WithPath(v1alpha1.CredentialsCA))))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName("database-ca").WithMountPath(databaseCAMount).WithReadOnly(true))
}

// resources defaults to a small request, so the scheduler and the HPA have
// something to work with, and a bound, so one app cannot take a node's
// memory. A memory request without a limit gets the request as its limit.
func resources(app *v1alpha1.WebApp) *corev1.ResourceRequirements {
	if app.Spec.Resources != nil {
		return controller.WithMemoryLimit(app.Spec.Resources)
	}
	return &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		},
	}
}

func probe(app *v1alpha1.WebApp, pick func(*v1alpha1.WebAppProbes) *corev1.Probe, def *corev1.Probe) *corev1ac.ProbeApplyConfiguration {
	if app.Spec.Probes != nil && pick(app.Spec.Probes) != nil {
		return controller.ApplyConfig[corev1ac.ProbeApplyConfiguration](pick(app.Spec.Probes))
	}
	return controller.ApplyConfig[corev1ac.ProbeApplyConfiguration](def)
}

// readinessProbe asks the app over HTTP: a pod gets traffic once it answers.
func readinessProbe() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}},
		PeriodSeconds: 5, TimeoutSeconds: 2, FailureThreshold: 3,
	}
}

// livenessProbe only checks the port is open: an app that is slow to answer
// HTTP is taken out of rotation by readiness, not killed.
func livenessProbe() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
		InitialDelaySeconds: 10, PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 6,
	}
}

// service is the ClusterIP Service in front of app's pods.
func service(app *v1alpha1.WebApp, sel map[string]string) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(app.Name, app.Namespace).
		WithLabels(labels(app)).
		WithOwnerReferences(ownerReference(app)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(sel).
			WithPorts(corev1ac.ServicePort().WithName("http").WithProtocol(corev1.ProtocolTCP).
				WithPort(app.Spec.Port).WithTargetPort(intstr.FromString("http"))))
}

// hpa is the HorizontalPodAutoscaler of app, or nil without autoscaling.
func hpa(app *v1alpha1.WebApp) *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration {
	a := app.Spec.Autoscaling
	if a == nil {
		return nil
	}
	target := a.TargetCPUUtilizationPercentage
	if target == 0 {
		target = 80
	}
	return autoscalingv2ac.HorizontalPodAutoscaler(app.Name, app.Namespace).
		WithLabels(labels(app)).
		WithOwnerReferences(ownerReference(app)).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
			// The WebApp, not its Deployment: its scale selector leaves a
			// canary's pods out, so they never skew the stable count.
			WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().WithAPIVersion(v1alpha1.GroupVersion.String()).
				WithKind("WebApp").WithName(app.Name)).
			WithMinReplicas(max(a.MinReplicas, 1)).
			WithMaxReplicas(a.MaxReplicas).
			WithMetrics(autoscalingv2ac.MetricSpec().WithType("Resource").WithResource(
				autoscalingv2ac.ResourceMetricSource().WithName(corev1.ResourceCPU).WithTarget(
					autoscalingv2ac.MetricTarget().WithType("Utilization").WithAverageUtilization(target)))))
}

// pdb keeps all but one pod up during voluntary disruptions, or is nil when
// app can only ever run one pod (a PDB would then block node drains). A
// canary's pods are not counted: one that crash-loops would take the one
// disruption allowed and block every drain. Pods that are not ready may
// always be evicted, for the same reason.
func pdb(app *v1alpha1.WebApp, sel map[string]string) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	if maxReplicas(app) <= 1 {
		return nil
	}
	return policyv1ac.PodDisruptionBudget(app.Name, app.Namespace).
		WithLabels(labels(app)).
		WithOwnerReferences(ownerReference(app)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel).WithMatchExpressions(
				metav1ac.LabelSelectorRequirement().WithKey(labelTrack).WithOperator(metav1.LabelSelectorOpNotIn).WithValues(trackCanary))))
}

// ingress routes spec.ingress.host to the Service, or is nil without ingress.
func ingress(app *v1alpha1.WebApp) *networkingv1ac.IngressApplyConfiguration {
	in := app.Spec.Ingress
	if in == nil {
		return nil
	}
	path := in.Path
	if path == "" {
		path = "/"
	}
	spec := networkingv1ac.IngressSpec().WithRules(networkingv1ac.IngressRule().WithHost(in.Host).WithHTTP(
		networkingv1ac.HTTPIngressRuleValue().WithPaths(networkingv1ac.HTTPIngressPath().
			WithPath(path).WithPathType("Prefix").
			WithBackend(networkingv1ac.IngressBackend().WithService(
				networkingv1ac.IngressServiceBackend().WithName(app.Name).WithPort(
					networkingv1ac.ServiceBackendPort().WithName("http")))))))
	if in.ClassName != "" {
		spec.WithIngressClassName(in.ClassName)
	}
	if in.TLSSecretName != "" {
		spec.WithTLS(networkingv1ac.IngressTLS().WithHosts(in.Host).WithSecretName(in.TLSSecretName))
	}
	return networkingv1ac.Ingress(app.Name, app.Namespace).
		WithLabels(labels(app)).
		WithOwnerReferences(ownerReference(app)).
		WithSpec(spec)
}
