package database

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// LabelDatabase names the Database a pod, volume or other child belongs to.
const LabelDatabase = labelDatabase

const (
	labelDatabase = "daytwo.dev/database"
	// labelRole is set on each pod by the operator: the -rw and -ro Services select on it.
	labelRole = "daytwo.dev/role"

	annRestartParameters = "daytwo.dev/restart-parameters"
	// labelFinalBackupOf marks the DatabaseBackup of a Snapshot deletion.
	labelFinalBackupOf = "daytwo.dev/final-backup-of"
	// StatefulSet annotations: the facts a rollback needs, kept on the object they describe.
	annMajor       = "daytwo.dev/major"
	annGoodImage   = "daytwo.dev/good-image"
	annFailedImage = "daytwo.dev/failed-image"
	// annRunningParameters holds the restart-only settings every instance
	// last ran with, so a pending restart is known even while its pods are
	// being replaced.
	annRunningParameters = "daytwo.dev/running-parameters"

	containerPostgres = "postgres"
	// containerInit copies the instance manager into the pod.
	containerInit    = "bootstrap-controller"
	containerRestore = "restore"
	volumeData       = "pgdata"
	dataMount        = instanceapi.DataMount
	controllerMount  = instanceapi.ControllerMount
	terminationGrace = 60
)

// instanceServiceAccount, instanceRole and instanceRoleBinding let the
// instance managers read, watch and renew their Database's primary Lease,
// and nothing else (a watch of one named object, by field selector, is
// authorized by resourceNames).
func instanceServiceAccount(db *v1alpha1.Database) *corev1ac.ServiceAccountApplyConfiguration {
	userLabels, userAnnotations := inherited(db)
	return corev1ac.ServiceAccount(instanceAccountName(db), db.Namespace).
		WithLabels(userLabels).WithLabels(labels(db)).WithAnnotations(userAnnotations).
		WithOwnerReferences(ownerReference(db))
}

func instanceRole(db *v1alpha1.Database) *rbacv1ac.RoleApplyConfiguration {
	return rbacv1ac.Role(instanceAccountName(db), db.Namespace).
		WithLabels(labels(db)).WithOwnerReferences(ownerReference(db)).
		WithRules(rbacv1ac.PolicyRule().WithAPIGroups(coordinationv1.GroupName).WithResources("leases").
			WithResourceNames(leaseName(db)).WithVerbs("get", "list", "watch", "update"))
}

func instanceRoleBinding(db *v1alpha1.Database) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(instanceAccountName(db), db.Namespace).
		WithLabels(labels(db)).WithOwnerReferences(ownerReference(db)).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(instanceAccountName(db))).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(instanceAccountName(db)).WithNamespace(db.Namespace))
}

// primaryLease is the Lease created with a new Database: ordinal 0 makes
// the data, so it holds it first. Afterwards only failover moves it.
func primaryLease(db *v1alpha1.Database) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName(db), Namespace: db.Namespace, Labels: labels(db)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(firstHolder(db))},
	}
}

// service is one of the three Services. role "" selects every instance
// (the headless Service for stable pod DNS names).
func service(db *v1alpha1.Database, name, role string) *corev1ac.ServiceApplyConfiguration {
	sel := selectorLabels(db)
	spec := corev1ac.ServiceSpec().
		WithPorts(corev1ac.ServicePort().WithName("postgresql").WithPort(instanceapi.PostgresPort).
			WithTargetPort(intstr.FromString("postgresql")).WithProtocol(corev1.ProtocolTCP))
	svc := corev1ac.Service(name, db.Namespace).
		WithLabels(labels(db)).
		WithOwnerReferences(ownerReference(db))
	if role == "" {
		// Replicas must resolve the primary before it is ready to clone it.
		spec.WithClusterIP(corev1.ClusterIPNone).WithPublishNotReadyAddresses(true)
	} else {
		sel[labelRole] = role
		exposeService(svc, spec, serviceTemplate(db, role))
	}
	return svc.WithSpec(spec.WithSelector(sel))
}

// serviceTemplate is spec.services' template for the -rw (role primary) or
// -ro (role replica) Service, or nil.
func serviceTemplate(db *v1alpha1.Database, role string) *v1alpha1.ServiceTemplate {
	s := db.Spec.Services
	switch {
	case s == nil:
		return nil
	case role == "primary":
		return s.ReadWrite
	default:
		return s.ReadOnly
	}
}

// exposeService sets a Service's type, annotations and source ranges from
// its template; a ClusterIP Service without a template is left as it
// always was.
func exposeService(svc *corev1ac.ServiceApplyConfiguration, spec *corev1ac.ServiceSpecApplyConfiguration, t *v1alpha1.ServiceTemplate) {
	if t == nil {
		return
	}
	svc.WithAnnotations(t.Annotations)
	if t.Type != "" && t.Type != corev1.ServiceTypeClusterIP {
		spec.WithType(t.Type)
	}
	if len(t.LoadBalancerSourceRanges) > 0 {
		spec.WithLoadBalancerSourceRanges(t.LoadBalancerSourceRanges...)
	}
}

func configMap(db *v1alpha1.Database, p plan) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(configName(db), db.Namespace).
		WithLabels(labels(db)).
		WithOwnerReferences(ownerReference(db)).
		WithData(configData(db, p))
}

func configData(db *v1alpha1.Database, p plan) map[string]string {
	data := map[string]string{
		instanceapi.ParametersFile:  p.parametersConf(),
		instanceapi.ReplicationFile: p.replicationConf(db),
	}
	if conf := p.replicaConf(); conf != "" {
		data[instanceapi.ReplicaSourceFile] = conf
	}
	if conf := p.archiveConf(); conf != "" {
		data[instanceapi.ArchiveFile] = conf
	}
	return data
}

// configHash identifies the ConfigMap's content (see annConfig).
func configHash(db *v1alpha1.Database, p plan) string {
	data := configData(db, p)
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%s\x00%s\x00", k, data[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// podDisruptionBudget lets a drain take one replica at a time. It selects
// replicas only (the eviction API refuses a pod that two budgets select),
// and counts with minAvailable: a maxUnavailable budget would count against
// the whole StatefulSet, primary included, and allow no eviction at all.
func podDisruptionBudget(db *v1alpha1.Database, p plan) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	sel := selectorLabels(db)
	sel[labelRole] = "replica"
	return policyv1ac.PodDisruptionBudget(db.Name, db.Namespace).
		WithLabels(labels(db)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMinAvailable(intstr.FromInt32(max(p.instances-2, 0))).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}

// primaryDisruptionBudget refuses the eviction of the primary (a node
// drain): once its node is cordoned, the operator switches over to a
// replica elsewhere, and the old primary, now a replica, may go under the
// Database's other budget. maxUnavailable 0 counts against the whole
// StatefulSet, so it allows nothing even in the moment when the primary
// moves and two pods carry the primary label (labelRoles labels the new
// one first); minAvailable 1 allowed one eviction then.
func primaryDisruptionBudget(db *v1alpha1.Database) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	sel := selectorLabels(db)
	sel[labelRole] = "primary"
	return policyv1ac.PodDisruptionBudget(primaryBudgetName(db), db.Namespace).
		WithLabels(labels(db)).
		WithOwnerReferences(ownerReference(db)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(0)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}

// credentialsData is the application Secret's content: what WebApps and
// users connect with.
func credentialsData(db *v1alpha1.Database, password string) map[string][]byte {
	database, owner := db.AppDatabase()
	host := db.PrimaryHost()
	port := strconv.Itoa(instanceapi.PostgresPort)
	return map[string][]byte{
		v1alpha1.CredentialsHost:     []byte(host),
		v1alpha1.CredentialsPort:     []byte(port),
		v1alpha1.CredentialsDatabase: []byte(database),
		v1alpha1.CredentialsUser:     []byte(owner),
		v1alpha1.CredentialsPassword: []byte(password),
		v1alpha1.CredentialsURI:      []byte(connectionURI(owner, password, host, port, database)),
	}
}

// setPoolerKeys adds to connection Secret data d the read-write pool's
// host and a URI through it, for d's user, password and database, when
// db has a pooler; else it removes them.
func setPoolerKeys(db *v1alpha1.Database, d map[string][]byte) {
	if db.Spec.Pooler == nil {
		delete(d, v1alpha1.CredentialsPoolerHost)
		delete(d, v1alpha1.CredentialsPoolerURI)
		return
	}
	d[v1alpha1.CredentialsPoolerHost] = []byte(poolerHost(db))
	d[v1alpha1.CredentialsPoolerURI] = []byte(connectionURI(string(d[v1alpha1.CredentialsUser]), string(d[v1alpha1.CredentialsPassword]),
		poolerHost(db), string(d[v1alpha1.CredentialsPort]), string(d[v1alpha1.CredentialsDatabase])))
}

// connectionURI is the credentials Secret's uri: it verifies the server's
// certificate, with the CA from the Secret's ca.crt (PGSSLROOTCERT, or
// sslrootcert added by the client).
func connectionURI(user, password, host, port, database string) string {
	u := url.URL{Scheme: "postgresql", User: url.UserPassword(user, password), Host: net.JoinHostPort(host, port), Path: "/" + database,
		RawQuery: "sslmode=verify-full"}
	return u.String()
}

// oneShotBackup is a DatabaseBackup without a schedule that stores db's
// backups in its backup storage (spec.backupStorage, else spec.backup's),
// keeping the newest: the final and the pre-upgrade backups. Its runs are
// asked for with AnnotationBackupRequested, among annotations.
func oneShotBackup(db *v1alpha1.Database, name string, labels, annotations map[string]string) *v1alpha1.DatabaseBackup {
	return &v1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels, Annotations: annotations},
		Spec: v1alpha1.DatabaseBackupSpec{
			DatabaseRef: v1alpha1.LocalObjectReference{Name: db.Name},
			Storage:     finalBackupStorage(db),
			Retention:   &v1alpha1.BackupRetention{KeepLast: 1},
		},
	}
}
