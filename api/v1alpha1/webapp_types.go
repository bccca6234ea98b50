package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// WebAppDeletionPolicy says what happens to a WebApp's children when it is deleted.
// +kubebuilder:validation:Enum=Delete;Orphan
type WebAppDeletionPolicy string

const (
	// WebAppDeletionDelete removes the children with the WebApp (garbage collection).
	WebAppDeletionDelete WebAppDeletionPolicy = "Delete"
	// WebAppDeletionOrphan removes daytwo's ownership and leaves the app running.
	WebAppDeletionOrphan WebAppDeletionPolicy = "Orphan"
)

// ConfigRefKind is the kind of object a config reference names.
// +kubebuilder:validation:Enum=ConfigMap;Secret
type ConfigRefKind string

const (
	// ConfigRefConfigMap names a ConfigMap.
	ConfigRefConfigMap ConfigRefKind = "ConfigMap"
	// ConfigRefSecret names a Secret.
	ConfigRefSecret ConfigRefKind = "Secret"
)

// WebApp reasons.
const (
	// ReasonConflictingResource means a child of the same name exists and daytwo does not own it.
	ReasonConflictingResource = "ConflictingResource"
	// ReasonMissingReference means a referenced ConfigMap, Secret or Database does not exist.
	ReasonMissingReference = "MissingReference"
	// ReasonRolledBack means a revision missed its progress deadline and the previous one was restored.
	ReasonRolledBack = "RolledBack"
	// ReasonRollingOut means a new revision is being rolled out.
	ReasonRollingOut = "RollingOut"
	// ReasonProgressDeadlineExceeded means a revision missed its deadline and there was nothing to roll back to.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonUnavailable means fewer pods are available than asked for.
	ReasonUnavailable = "Unavailable"
	// ReasonRolloutComplete means no rollout is in progress.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonPodSecurityViolation means the pod template breaks the Pod
	// Security level its namespace enforces; daytwo does not apply it.
	ReasonPodSecurityViolation = "PodSecurityViolation"
	// ReasonContainerConfigError means the kubelet refuses to create the
	// container, for example an image that runs as root under runAsNonRoot.
	ReasonContainerConfigError = "ContainerConfigError"
	// ReasonImagePullFailed means the kubelet cannot pull the image.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonCrashLoopBackOff means the container keeps exiting.
	ReasonCrashLoopBackOff = "CrashLoopBackOff"
	// ReasonOOMKilled means the container was killed for exceeding its memory limit.
	ReasonOOMKilled = "OOMKilled"
	// ReasonUnschedulable means the scheduler cannot place a pod.
	ReasonUnschedulable = "Unschedulable"
	// ReasonCanaryProgressing means a canary runs beside the stable pods
	// and moves through its steps.
	ReasonCanaryProgressing = "CanaryProgressing"
	// ReasonCanaryWaiting means a canary step waits for a promote request.
	ReasonCanaryWaiting = "CanaryWaiting"
	// ReasonCanaryPromoting means the canary passed every step and the
	// stable pods roll to its revision.
	ReasonCanaryPromoting = "CanaryPromoting"
	// ReasonCanaryAborted means a signal (a restart, an OOM kill, a
	// readiness flap, a failed HTTP check, a missed deadline or a request)
	// aborted the canary; its revision is not tried again until the spec
	// or the config it reads changes.
	ReasonCanaryAborted = "CanaryAborted"
	// ReasonDatabaseUnavailable means a rollout is paused while the
	// Database of spec.databaseRef fails over, upgrades or is not Ready.
	ReasonDatabaseUnavailable = "DatabaseUnavailable"
)

// WebAppRolloutStrategy is how a new revision replaces the running one.
// +kubebuilder:validation:Enum=RollingUpdate;Canary
type WebAppRolloutStrategy string

const (
	// RolloutRollingUpdate replaces pods a few at a time (the Deployment's
	// rolling update), rolling back a revision that misses its deadline.
	RolloutRollingUpdate WebAppRolloutStrategy = "RollingUpdate"
	// RolloutCanary runs the new revision beside the stable pods through
	// spec.rollout.canary.steps, aborting on the first bad signal.
	RolloutCanary WebAppRolloutStrategy = "Canary"
)

// WebAppSpec is what a user declares for a stateless application.
// +kubebuilder:validation:XValidation:rule="!has(self.securityContext) || !has(self.securityContext.runAsUser) || self.securityContext.runAsUser != 0 || (has(self.securityContext.runAsNonRoot) ? !self.securityContext.runAsNonRoot : (has(self.podSecurityContext) && has(self.podSecurityContext.runAsNonRoot) && !self.podSecurityContext.runAsNonRoot))",message="securityContext.runAsUser 0 is root, which daytwo's default runAsNonRoot: true refuses: set securityContext.runAsNonRoot: false as well",fieldPath=".securityContext.runAsUser"
// +kubebuilder:validation:XValidation:rule="!has(self.podSecurityContext) || !has(self.podSecurityContext.runAsUser) || self.podSecurityContext.runAsUser != 0 || (has(self.podSecurityContext.runAsNonRoot) && !self.podSecurityContext.runAsNonRoot) || (has(self.securityContext) && has(self.securityContext.runAsNonRoot) && !self.securityContext.runAsNonRoot)",message="podSecurityContext.runAsUser 0 is root, which daytwo's default runAsNonRoot: true refuses: set podSecurityContext.runAsNonRoot: false as well",fieldPath=".podSecurityContext.runAsUser"
type WebAppSpec struct {
	// image is the container image to run, for example "ghcr.io/acme/shop:1.4.2".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image"`

	// imagePullPolicy of the container. Defaults to IfNotPresent.
	// +optional
	// +kubebuilder:default=IfNotPresent
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// replicas is the number of stable pods. Defaults to 1. With
	// autoscaling it is the HorizontalPodAutoscaler's: it writes it
	// through the WebApp's scale subresource (daytwo sets it once, from the
	// pods running, when autoscaling starts), within minReplicas and
	// maxReplicas; leave it out of what you apply.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// port is the TCP port the application listens on.
	// +optional
	// +kubebuilder:default=8080
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// command overrides the image's entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Command []string `json:"command,omitempty"`

	// args overrides the image's arguments.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env sets environment variables in the container.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// envFrom loads environment variables from ConfigMaps or Secrets. Pods
	// roll when one of them changes.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// serviceAccountName runs the pods as this ServiceAccount; defaults to
	// the namespace's default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// automountServiceAccountToken mounts the ServiceAccount's API token
	// into the pods. Off unless set: most apps never call the Kubernetes
	// API, and a token they do not need is one an attacker can use.
	// +optional
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken,omitempty"`

	// securityContext overrides, field by field, the app container's
	// restricted default (allowPrivilegeEscalation: false, capabilities:
	// drop ALL; runAsNonRoot: true comes from the pod). A field set here
	// replaces daytwo's whole; fields left unset keep the default. For an
	// image that must start as root, such as the official nginx:
	// runAsNonRoot: false, runAsUser: 0, and capabilities with drop ALL
	// and add CHOWN, SETUID, SETGID, NET_BIND_SERVICE. daytwo refuses a
	// template that breaks the Pod Security level its namespace enforces
	// (the pod-security.kubernetes.io/enforce label).
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`

	// podSecurityContext overrides, field by field, the pod's restricted
	// default (runAsNonRoot: true, seccompProfile RuntimeDefault), for
	// example to set fsGroup or runAsUser for the whole pod.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`

	// resources of the container. When unset, daytwo requests 100m CPU and 128Mi memory.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// probes override the probes daytwo derives from port.
	// +optional
	Probes *WebAppProbes `json:"probes,omitempty"`

	// autoscaling runs a HorizontalPodAutoscaler instead of a fixed replica count.
	// +optional
	Autoscaling *WebAppAutoscaling `json:"autoscaling,omitempty"`

	// rollout tunes how new revisions replace old ones.
	// +optional
	Rollout *WebAppRollout `json:"rollout,omitempty"`

	// configRefs are ConfigMaps and Secrets whose changes roll the pods, in
	// addition to those referenced from env and envFrom.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	ConfigRefs []ConfigRef `json:"configRefs,omitempty"`

	// ingress exposes the app over HTTP(S) through an Ingress.
	// +optional
	Ingress *WebAppIngress `json:"ingress,omitempty"`

	// databaseRef names a Database in the same namespace, and the role the
	// app connects as; DATABASE_URL and the PG* variables are injected from
	// that role's Secret (the credentials Secret without a role), and the
	// pods roll when it changes.
	// +optional
	DatabaseRef *WebAppDatabaseRef `json:"databaseRef,omitempty"`

	// deletionPolicy says what happens to the children when the WebApp is
	// deleted: Delete removes them, Orphan leaves the app running.
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy WebAppDeletionPolicy `json:"deletionPolicy,omitempty"`

	// WebAppPodShape: volumes, extra containers and where the pods run.
	WebAppPodShape `json:",inline"`
}

// WebAppProbes override the probes daytwo derives from the port.
type WebAppProbes struct {
	// readiness replaces the default HTTP GET / readiness probe.
	// +optional
	Readiness *corev1.Probe `json:"readiness,omitempty"`
	// liveness replaces the default TCP liveness probe.
	// +optional
	Liveness *corev1.Probe `json:"liveness,omitempty"`
	// startup adds a startup probe.
	// +optional
	Startup *corev1.Probe `json:"startup,omitempty"`
}

// WebAppAutoscaling configures a HorizontalPodAutoscaler (autoscaling/v2).
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
type WebAppAutoscaling struct {
	// minReplicas is the lower bound of the replica count.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// maxReplicas is the upper bound of the replica count.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`

	// targetCPUUtilizationPercentage is the average CPU use, as a percentage of
	// the request, that the autoscaler aims for.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	TargetCPUUtilizationPercentage int32 `json:"targetCPUUtilizationPercentage,omitempty"`
}

// WebAppRollout tunes the rolling update and its automatic rollback.
// +kubebuilder:validation:XValidation:rule="!has(self.canary) || (has(self.strategy) && self.strategy == 'Canary')",message="canary is read only with strategy: Canary",fieldPath=".canary"
type WebAppRollout struct {
	// maxSurge is how many pods above the desired count may exist during a rollout.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",message="maxSurge must be a non-negative integer or a percentage such as 25%"
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// maxUnavailable is how many pods may be unavailable during a rollout.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",message="maxUnavailable must be a non-negative integer or a percentage such as 25%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// progressDeadlineSeconds is how long a new revision may take to become
	// available before daytwo rolls back to the last available one.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	ProgressDeadlineSeconds int32 `json:"progressDeadlineSeconds,omitempty"`

	// strategy is RollingUpdate (the default) or Canary.
	// +optional
	// +kubebuilder:default=RollingUpdate
	Strategy WebAppRolloutStrategy `json:"strategy,omitempty"`

	// canary tunes the Canary strategy: its steps and what aborts it.
	// +optional
	Canary *WebAppCanary `json:"canary,omitempty"`
}

// WebAppCanary is a canary rollout: the new revision's pods run beside
// every stable pod, behind the same Service, so traffic follows the ratio
// of pods; each step grows the canary and watches it for analysisSeconds.
type WebAppCanary struct {
	// steps the canary goes through before the stable pods take its
	// revision. Defaults to one pod, then 25%, then 50%, each watched for
	// 60 seconds.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Steps []WebAppCanaryStep `json:"steps,omitempty"`

	// maxRestarts is how many container restarts the canary's pods may
	// have, in all, before the canary is aborted. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxRestarts int32 `json:"maxRestarts,omitempty"`

	// httpCheck has the operator send GET requests to each
	// canary pod while a step is watched, and abort the canary when too
	// few succeed.
	// +optional
	HTTPCheck *WebAppHTTPCheck `json:"httpCheck,omitempty"`
}

// WebAppCanaryStep is one canary step: how many pods run the new revision
// and how long they are watched before the next step.
// +kubebuilder:validation:XValidation:rule="has(self.weight) != has(self.replicas)",message="a step sets exactly one of weight and replicas"
type WebAppCanaryStep struct {
	// weight is the canary's size as a percentage of the desired replicas,
	// rounded up to whole pods (at least one).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight *int32 `json:"weight,omitempty"`

	// replicas is the canary's size in pods.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// analysisSeconds is how long the step's pods are watched once all of
	// them are available, before the next step. Defaults to 60.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	AnalysisSeconds *int32 `json:"analysisSeconds,omitempty"`

	// waitForPromotion holds the canary after this step's analysis until a
	// daytwo.dev/promote-requested time newer than the canary's start.
	// +optional
	WaitForPromotion bool `json:"waitForPromotion,omitempty"`
}

// WebAppHTTPCheck is an HTTP GET the operator sends to each canary pod.
type WebAppHTTPCheck struct {
	// path of the request. Defaults to "/".
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`

	// port of the request; defaults to spec.port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// intervalSeconds between two rounds of requests. Defaults to 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`

	// successPercent is the share of requests (2xx and 3xx answers within
	// 2 seconds) below which the canary is aborted, once at least
	// minRequests were sent in the step. Defaults to 95.
	// +optional
	// +kubebuilder:default=95
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuccessPercent int32 `json:"successPercent,omitempty"`

	// minRequests a step sends before its success rate can abort it.
	// Defaults to 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MinRequests int32 `json:"minRequests,omitempty"`
}

// ConfigRef names a ConfigMap or Secret whose content is hashed into the pod template.
type ConfigRef struct {
	// kind of the referenced object.
	// +required
	Kind ConfigRefKind `json:"kind"`

	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// WebAppIngress configures an Ingress for the app.
type WebAppIngress struct {
	// host is the DNS name the app is served on, for example "shop.example.com".
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Host string `json:"host"`

	// path is the URL path prefix routed to the app.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`

	// tlsSecretName names a kubernetes.io/tls Secret; when set the app is served over HTTPS.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TLSSecretName string `json:"tlsSecretName,omitempty"`

	// className is the IngressClass to use; empty means the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClassName string `json:"className,omitempty"`
}

// WebAppStatus is what daytwo observed about a WebApp.
type WebAppStatus struct {
	// conditions are Ready, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of pods that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// availableReplicas is the number of pods ready for at least minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`

	// selector is the label selector of the pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// url is where the app is reached: the ingress URL when there is one,
	// otherwise the in-cluster Service URL.
	// +optional
	URL string `json:"url,omitempty"`

	// serviceURL is the in-cluster URL of the Service.
	// +optional
	ServiceURL string `json:"serviceURL,omitempty"`

	// currentImage is the image of the revision that is available.
	// +optional
	CurrentImage string `json:"currentImage,omitempty"`

	// canary describes the canary while one runs, or the last one aborted
	// while its revision is held back.
	// +optional
	Canary *WebAppCanaryStatus `json:"canary,omitempty"`
}

// WebAppCanaryStatus is where a canary stands.
type WebAppCanaryStatus struct {
	// step is the step the canary is on, from 1; steps+1 while it is
	// promoted.
	// +optional
	Step int32 `json:"step,omitempty"`
	// steps is how many steps there are.
	// +optional
	Steps int32 `json:"steps,omitempty"`
	// canaryImage is the new revision's image.
	// +optional
	CanaryImage string `json:"canaryImage,omitempty"`
	// stableImage is the image the stable pods run.
	// +optional
	StableImage string `json:"stableImage,omitempty"`
	// canaryReplicas is the pods the canary is asked to run.
	// +optional
	CanaryReplicas int32 `json:"canaryReplicas,omitempty"`
	// stableReplicas is the pods the stable revision is asked to run.
	// +optional
	StableReplicas int32 `json:"stableReplicas,omitempty"`
	// canaryWeight is the canary's share, in percent, of the available
	// pods behind the Service: its share of new connections.
	// +optional
	CanaryWeight int32 `json:"canaryWeight,omitempty"`
	// stableWeight is the stable pods' share, in percent.
	// +optional
	StableWeight int32 `json:"stableWeight,omitempty"`
	// message says what the canary waits for, or which signal aborted it.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
}

// WebApp is a stateless application: a Deployment, Service, and optionally an
// HPA, PDB and Ingress, with safe rollouts and config-driven restarts.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=wa,categories=daytwo
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Canary",type=string,JSONPath=`.status.canary.canaryImage`,priority=1
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.canary.step`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WebApp struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec WebAppSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status WebAppStatus `json:"status,omitempty"`
}

// WebAppList is a list of WebApps.
//
// +kubebuilder:object:root=true
type WebAppList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebApp `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &WebApp{}, &WebAppList{})
}

// WebAppDatabaseRef names the Database a WebApp uses and its role.
type WebAppDatabaseRef struct {
	// name of the Database.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// role is a login role of the Database's spec.roles to connect as,
	// with its Secret <database>-role-<role>. Without it the app connects
	// as the application owner, with the credentials Secret.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Role string `json:"role,omitempty"`

	// pooler connects through the Database's read-write PgBouncer pool
	// (its spec.pooler) instead of to the primary: DATABASE_URL and
	// PGHOST name the pool, whose certificate the same CA verifies.
	// +optional
	Pooler bool `json:"pooler,omitempty"`
}

// SecretName is the Secret the WebApp's database variables come from.
func (r *WebAppDatabaseRef) SecretName() string {
	db := Database{}
	db.Name = r.Name
	if r.Role != "" {
		return db.RoleSecretName(r.Role)
	}
	return db.CredentialsSecretName()
}
