// Names and labels of a Database's children, derived from the Database
// alone, so any phase (and the instance manager's side of the contract)
// finds them without a lookup.

package database

import (
	"fmt"
	"maps"
	"strconv"

	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func selectorLabels(db *v1alpha1.Database) map[string]string {
	return map[string]string{labelDatabase: db.Name}
}

// labels go on every child of db.
func labels(db *v1alpha1.Database) map[string]string {
	l := map[string]string{
		"app.kubernetes.io/name":     "postgresql",
		"app.kubernetes.io/instance": db.Name,
		controller.ManagedByLabel:    controller.ManagedBy,
	}
	maps.Copy(l, selectorLabels(db))
	return l
}

// Child names, each from one place.
func headlessName(db *v1alpha1.Database) string { return instanceapi.HeadlessService(db.Name) }

func rwName(db *v1alpha1.Database) string { return db.PrimaryServiceName() }

func roName(db *v1alpha1.Database) string { return db.ReplicaServiceName() }

func configName(db *v1alpha1.Database) string { return db.Name + "-config" }

func replicationName(db *v1alpha1.Database) string { return db.ReplicationSecretName() }

func podName(db *v1alpha1.Database, ordinal int) string {
	return db.Name + "-" + strconv.Itoa(ordinal)
}

func pvcName(db *v1alpha1.Database, ordinal int) string {
	return volumeData + "-" + podName(db, ordinal)
}

func apiSecretName(db *v1alpha1.Database) string { return db.Name + "-instance-api" }

func instanceAccountName(db *v1alpha1.Database) string { return series.ServiceAccountName(db.Name) }

func leaseName(db *v1alpha1.Database) string { return instanceapi.LeaseName(db.Name) }

// primaryHost is the -rw Service, which follows the primary lease's holder.
// Replicas clone, stream and rewind from the holder's own address
// (instanceapi.PeerHost) and fall back to it only while they do not know
// the holder.
func primaryHost(db *v1alpha1.Database) string { return db.PrimaryHost() }

func endpoint(db *v1alpha1.Database) string {
	return fmt.Sprintf("%s.%s.svc:%d", rwName(db), db.Namespace, instanceapi.PostgresPort)
}

func ownerReference(db *v1alpha1.Database) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind("Database").
		WithName(db.Name).WithUID(db.UID).
		WithController(true).WithBlockOwnerDeletion(true)
}

func primaryBudgetName(db *v1alpha1.Database) string { return db.Name + "-primary" }
