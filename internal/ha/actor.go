package ha

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Actor carries out the protocol's decisions for the Database controller:
// it moves the primary Lease (failover, switchover), asks the instance
// managers to promote and to step down, and announces in the status that
// the primary moves. Its phases read and change a View.
type Actor struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// Instances calls the instance managers' API.
	Instances *instanceapi.Client
	// Host is the Database controller's side: what the actor asks of the
	// pods and the instances without owning them.
	Host Host
}

// Host is what the Database controller does for the Actor.
type Host interface {
	// AskInstances asks the instance managers of pods (but skip) for
	// their status; fresh asks for WAL positions read for the answer.
	AskInstances(ctx context.Context, db *v1alpha1.Database, pods []corev1.Pod, skip string, fresh bool) ([]v1alpha1.InstanceStatus, map[string]instanceapi.Status)
	// ListPods lists the Database's pods again.
	ListPods(ctx context.Context, db *v1alpha1.Database) ([]corev1.Pod, error)
	// LabelRoles labels primary's pod the primary, the others replicas:
	// what the -rw and -ro Services select on.
	LabelRoles(ctx context.Context, pods []corev1.Pod, primary string) error
	// Target is how to reach pod's instance manager (address and TLS).
	Target(ctx context.Context, db *v1alpha1.Database, pod *corev1.Pod) (instanceapi.Target, error)
	// APIToken is the token the instance managers ask of whoever changes
	// them.
	APIToken(ctx context.Context, db *v1alpha1.Database) (string, error)
	// PausePools pauses db's connection pools (spec.pooler), waiting a
	// bounded time for the transactions under way, and returns what
	// resumes them: a switchover happens between the two, so clients of
	// the pools wait instead of failing.
	PausePools(ctx context.Context, db *v1alpha1.Database) (resume func(context.Context))
}

// targetOf is the Host's target for the pod of that name in v.
func (a *Actor) targetOf(ctx context.Context, db *v1alpha1.Database, v *View, name string) (instanceapi.Target, error) {
	if p := v.PodNamed(name); p != nil {
		return a.Host.Target(ctx, db, p)
	}
	return instanceapi.Target{}, fmt.Errorf("pod %s does not exist", name)
}

// HandoverPatience is how long a switchover's target keeps a lease it has
// not been promoted with (it lacks the old primary's last WAL, say) before
// failover chooses again among all replicas.
const HandoverPatience = 2 * time.Minute

// handoverExpired says the lease was handed over more than
// HandoverPatience ago.
func handoverExpired(l *coordinationv1.Lease, now time.Time) bool {
	return l.Spec.AcquireTime != nil && now.Sub(l.Spec.AcquireTime.Time) > HandoverPatience
}

// extendLease renews the lease for its holder, on the operator's side,
// with the resourceVersion read.
func (a *Actor) extendLease(ctx context.Context, v *View) error {
	l := v.Lease.DeepCopy()
	t := metav1.NewMicroTime(a.Clock.Now())
	l.Spec.RenewTime = &t
	if err := a.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("failed to extend Lease %s for %s: %w", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), err)
	}
	v.Lease = l
	return nil
}

// Ordinal is the StatefulSet ordinal of a pod's name, or -1.
func Ordinal(pod string) int {
	i := strings.LastIndex(pod, "-")
	n, err := strconv.Atoi(pod[i+1:])
	if err != nil {
		return -1
	}
	return n
}
