package database

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// tier is what a size sets. Memory is requested in full (a database's
// memory is never overcommitted); CPU requests are a quarter of the limit
// so the tiers also fit small nodes. Explicit resources give Guaranteed QoS.
type tier struct {
	instances         int32
	cpu, memory, disk string
}

var tiers = map[v1alpha1.DatabaseSize]tier{
	v1alpha1.SizeSmall:  {1, "1", "1Gi", "10Gi"},
	v1alpha1.SizeMedium: {2, "2", "4Gi", "50Gi"},
	v1alpha1.SizeLarge:  {3, "4", "16Gi", "200Gi"},
}

// plan is a Database's spec resolved against its tier: what every builder reads.
type plan struct {
	instances    int32
	resources    corev1.ResourceRequirements
	storage      resource.Quantity
	storageClass *string
	image        string
	params       []postgres.Effective
	// syncReplicas is how many replicas must flush each commit (0:
	// asynchronous); syncRequired keeps that number when fewer stream.
	syncReplicas int32
	syncRequired bool
	// archive is where WAL is archived (resolveArchive), or nil.
	archive *archivePlan
	// replica is where a replica Database's source is (resolveReplica), or nil.
	replica *replicaPlan
}

func newPlan(db *v1alpha1.Database) plan {
	t, ok := tiers[db.Spec.Size]
	if !ok {
		t = tiers[v1alpha1.SizeSmall]
	}
	cpu := resource.MustParse(t.cpu)
	p := plan{
		instances: t.instances,
		resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(cpu.MilliValue()/4, resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse(t.memory),
			},
			Limits: corev1.ResourceList{
				corev1.ResourceCPU:    cpu,
				corev1.ResourceMemory: resource.MustParse(t.memory),
			},
		},
		storage: resource.MustParse(t.disk),
		image:   db.Spec.Image,
	}
	if db.Spec.Instances != nil {
		p.instances = *db.Spec.Instances
	}
	if db.Spec.Resources != nil {
		p.resources = *controller.WithMemoryLimit(db.Spec.Resources)
	}
	if s := db.Spec.Storage; s != nil {
		if s.Size != nil {
			p.storage = s.Size.DeepCopy()
		}
		p.storageClass = s.StorageClassName
	}
	if p.image == "" {
		p.image = postgres.DefaultImage(db.Spec.Version)
	}
	p.params = postgres.Merge(postgres.Tune(tuningInput(p)), db.Spec.Parameters)
	if r := db.Spec.Replication; r != nil && r.Synchronous != nil {
		p.syncReplicas = r.Synchronous.Number
		p.syncRequired = r.Synchronous.DataDurability != v1alpha1.DataDurabilityPreferred
	}
	return p
}

// tuningInput reads the limits, falling back to the requests.
func tuningInput(p plan) postgres.Resources {
	pick := func(name corev1.ResourceName) *resource.Quantity {
		if q, ok := p.resources.Limits[name]; ok {
			return &q
		}
		if q, ok := p.resources.Requests[name]; ok {
			return &q
		}
		return nil
	}
	in := postgres.Resources{StorageBytes: p.storage.Value()}
	if q := pick(corev1.ResourceMemory); q != nil {
		in.MemoryBytes = q.Value()
	}
	if q := pick(corev1.ResourceCPU); q != nil {
		in.CPUMillis = q.MilliValue()
	}
	return in
}

// restartParameters is the JSON of the settings that need a restart; the
// pod template carries it, so changing one makes a new revision to roll.
func (p plan) restartParameters() string {
	b, _ := json.Marshal(postgres.RestartOnly(p.params)) //nolint:errchkjson // a map of strings always marshals, keys sorted
	return string(b)
}

func (p plan) parametersConf() string { return postgres.Render(p.params) }

// replicationConf is the instance managers' instanceapi.ReplicationFile.
func (p plan) replicationConf(db *v1alpha1.Database) string {
	b, _ := json.Marshal(p.replication(db)) //nolint:errchkjson // a struct of strings, ints and bools always marshals
	return string(b)
}

// replication is what replicationConf says.
func (p plan) replication(db *v1alpha1.Database) instanceapi.Replication {
	r := instanceapi.Replication{Synchronous: int(p.syncReplicas), Required: p.syncRequired}
	for i := range p.instances {
		r.Instances = append(r.Instances, fmt.Sprintf("%s-%d", db.Name, i))
	}
	return r
}

func (p plan) statusParameters() []v1alpha1.EffectiveParameter {
	out := make([]v1alpha1.EffectiveParameter, 0, len(p.params))
	for _, e := range p.params {
		out = append(out, v1alpha1.EffectiveParameter{Name: e.Name, Value: e.Value, Source: v1alpha1.ParameterSource(e.Source)})
	}
	return out
}
