package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// ErrLeaseLost says the primary lease names another instance.
var ErrLeaseLost = errors.New("the primary lease names another instance")

// Lease is the per-Database lock a primary must hold to serve writes (see
// instanceapi.LeaseDuration for the protocol).
type Lease interface {
	// Holder is the instance the lease names.
	Holder(ctx context.Context) (string, error)
	// Renew extends the lease for pod, recording lsn, the synchronous
	// replication in force (instanceapi.AnnotationSync) and the instances
	// whose promises it would serve on past the term
	// (instanceapi.AnnotationVouchers; nil records none). It fails with
	// ErrLeaseLost when the lease names another instance.
	Renew(ctx context.Context, pod, lsn, sync string, vouchers []string) error
	// Extend renews the lease for pod and nothing else: what the last
	// renewal recorded (its WAL position, the synchronous replication, a
	// handover's wait) stays. A holder whose server is not serving yet
	// extends; it fails with ErrLeaseLost when the lease names another.
	Extend(ctx context.Context, pod string) error
	// Release lets the lease expire now if pod holds it, so failover need
	// not wait for it to run out. lsn is a clean shutdown's checkpoint,
	// recorded as the holder's last WAL; "" after one that was not clean.
	Release(ctx context.Context, pod, lsn string) error
	// HandOver names to the holder, renewed now, if from holds the lease:
	// a switchover (asked at request), after from shut down cleanly at lsn.
	HandOver(ctx context.Context, from, to, lsn, request, token string) error
	// View reads the lease once: its holder, a handover's WAL, its last renewal.
	View(ctx context.Context) (LeaseView, error)
}

// LeaseView is what one read of the lease says.
type LeaseView struct {
	Holder string
	// HandoverLSN is the WAL a switchover's handover names ("" for none).
	HandoverLSN string
	// Renewed is the last renewal, on the renewer's clock (zero: released).
	Renewed time.Time
	// Duration is the term a renewal gives (zero: none recorded).
	Duration time.Duration
	// ReleasedBy is the holder before this one, when it released the
	// lease (instanceapi.AnnotationReleasedBy).
	ReleasedBy string
	// SourceClaim is a replica Database's word on its source's archive
	// (instanceapi.AnnotationSourceClaim): "" (claim it before a
	// promotion), claimed@<time> or waived.
	SourceClaim string
}

// validUntil is when a holder must have stopped serving under this view's
// last renewal, on its own clock (ha.ServeUntil). Zero when it was released.
func (v LeaseView) validUntil() time.Time {
	if v.Duration <= 0 {
		return time.Time{}
	}
	return ha.ServeUntil(v.Renewed, v.Duration)
}

// ServedRecord is a Lease that tells whether a primary ever served under
// it: the WAL position its last renewal recorded (AnnotationLeaseLSN), ""
// for a Database that never served.
type ServedRecord interface {
	ServedLSN(ctx context.Context) (string, error)
}

// HolderWatcher is a Lease that reports its holder as it changes.
type HolderWatcher interface {
	// WatchHolder calls changed with the holder each time the lease is
	// seen, until ctx ends; moved says the lease was handed on to it by an
	// update of the same lease that counted a transition and renewed it (a
	// failover's move or a switchover's handover), not merely listed, nor
	// made anew (a deleted and re-created lease names its first holder).
	WatchHolder(ctx context.Context, changed func(holder string, moved bool))
}

// KubeLease is Lease on a coordination.k8s.io Lease.
type KubeLease struct {
	Client coordinationv1client.LeaseInterface
	Name   string
	// Watch lists and watches the Lease; its client has no request
	// timeout, which would cut every watch short.
	Watch cache.ListerWatcher
	// Term is what each renewal records as the lease's duration; 0 is
	// instanceapi.LeaseDuration. The Manager fences by the same
	// (Config.LeaseDuration).
	Term time.Duration
}

// term is the duration k's renewals record, in whole seconds.
func (k *KubeLease) term() *int32 {
	return ptr.To(int32(leaseTerm(k.Term) / time.Second))
}

// leaseTerm is d, or instanceapi.LeaseDuration for 0.
func leaseTerm(d time.Duration) time.Duration {
	if d <= 0 {
		return instanceapi.LeaseDuration
	}
	return d
}

// NewKubeLease uses the pod's service account (in-cluster config), or
// $KUBECONFIG outside a pod.
func NewKubeLease(namespace, name string) (*KubeLease, error) {
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to configure the Kubernetes client: %w", err)
	}
	watching, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	c, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &KubeLease{Client: c.Leases(namespace), Name: name,
		Watch: cache.NewListWatchFromClient(watching.RESTClient(), "leases", namespace, fields.OneTermEqualSelector("metadata.name", name))}, nil
}

// WatchHolder implements HolderWatcher with an informer on the one Lease.
func (k *KubeLease) WatchHolder(ctx context.Context, changed func(holder string, moved bool)) {
	seen := func(old, obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Spec.HolderIdentity == nil {
			return
		}
		prev, _ := old.(*coordinationv1.Lease)
		changed(*l.Spec.HolderIdentity, handedOn(prev, l))
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: k.Watch,
		ObjectType:    &coordinationv1.Lease{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { seen(nil, obj) },
			UpdateFunc: seen,
		},
	})
	informer.RunWithContext(ctx)
}

func (k *KubeLease) get(ctx context.Context) (*coordinationv1.Lease, error) {
	l, err := k.Client.Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to read Lease %s: %w", k.Name, err)
	}
	return l, nil
}

// Holder implements Lease.
func (k *KubeLease) Holder(ctx context.Context) (string, error) {
	v, err := k.View(ctx)
	return v.Holder, err
}

// handedOn: the update from prev to l handed the lease on, as a failover's
// move and a switchover's handover do (a transition counted, a renewal),
// on the same lease (a re-created one starts from its first holder).
func handedOn(prev, l *coordinationv1.Lease) bool {
	return prev != nil && l != nil && prev.UID == l.UID && l.Spec.RenewTime != nil &&
		ptr.Deref(l.Spec.LeaseTransitions, 0) > ptr.Deref(prev.Spec.LeaseTransitions, 0)
}

// View implements Lease.
func (k *KubeLease) View(ctx context.Context) (LeaseView, error) {
	l, err := k.get(ctx)
	if err != nil {
		return LeaseView{}, err
	}
	v := LeaseView{Holder: ptr.Deref(l.Spec.HolderIdentity, ""), HandoverLSN: l.Annotations[instanceapi.AnnotationHandoverLSN],
		ReleasedBy: l.Annotations[instanceapi.AnnotationReleasedBy], SourceClaim: l.Annotations[instanceapi.AnnotationSourceClaim]}
	if l.Spec.RenewTime != nil {
		v.Renewed = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		v.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return v, nil
}

// ServedLSN implements ServedRecord.
func (k *KubeLease) ServedLSN(ctx context.Context) (string, error) {
	l, err := k.get(ctx)
	if err != nil {
		return "", err
	}
	return l.Annotations[instanceapi.AnnotationLeaseLSN], nil
}

// Renew implements Lease.
func (k *KubeLease) Renew(ctx context.Context, pod, lsn, sync string, vouchers []string) error {
	return k.renew(ctx, pod, "renew", func(l *coordinationv1.Lease) {
		// Acquired at the first renewal as a serving primary: the
		// operator reads a lease never acquired as a Database still
		// bootstrapping (Extend, before postgres serves, leaves it).
		if l.Spec.AcquireTime == nil {
			l.Spec.AcquireTime = l.Spec.RenewTime
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		if lsn != "" {
			l.Annotations[instanceapi.AnnotationLeaseLSN] = lsn
		}
		l.Annotations[instanceapi.AnnotationSync] = sync
		if vouchers != nil {
			l.Annotations[instanceapi.AnnotationVouchers] = strings.Join(vouchers, ",")
		} else {
			delete(l.Annotations, instanceapi.AnnotationVouchers)
		}
		// The holder renews as a primary: a handover's wait is over, and
		// so is any word about the holder before it.
		delete(l.Annotations, instanceapi.AnnotationHandoverLSN)
		delete(l.Annotations, instanceapi.AnnotationReleasedBy)
	})
}

// RecordSourceClaim implements SourceClaimRecorder.
func (k *KubeLease) RecordSourceClaim(ctx context.Context, pod, value string) error {
	return k.renew(ctx, pod, "record the source's claim in", func(l *coordinationv1.Lease) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[instanceapi.AnnotationSourceClaim] = value
	})
}

// SourceClaimRecorder is a Lease that records a replica Database's claim
// of its source's archive (instanceapi.AnnotationSourceClaim), for pod
// that holds it; the record extends the term as a renewal does.
type SourceClaimRecorder interface {
	RecordSourceClaim(ctx context.Context, pod, value string) error
}

// Extend implements Lease.
func (k *KubeLease) Extend(ctx context.Context, pod string) error {
	return k.renew(ctx, pod, "extend", func(*coordinationv1.Lease) {})
}

// renew starts a new term for pod, if the lease names it, with record
// applied to the lease too. The update carries the resourceVersion it
// read, so it cannot overwrite a transfer the operator made in between.
func (k *KubeLease) renew(ctx context.Context, pod, verb string, record func(*coordinationv1.Lease)) error {
	l, err := k.get(ctx)
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != pod {
		return ErrLeaseLost
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, k.term()
	record(l)
	if _, err := k.Client.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to %s Lease %s: %w", verb, k.Name, err)
	}
	return nil
}

// Release implements Lease: the holder stays, the renewal goes, and a
// clean shutdown's checkpoint is recorded as the holder's last WAL.
func (k *KubeLease) Release(ctx context.Context, pod, lsn string) error {
	l, err := k.get(ctx)
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != pod || l.Spec.RenewTime == nil {
		return nil
	}
	l.Spec.RenewTime = nil
	if lsn != "" {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[instanceapi.AnnotationLeaseLSN] = lsn
	}
	if _, err := k.Client.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to release Lease %s: %w", k.Name, err)
	}
	return nil
}

// HandOver implements Lease. Like Renew, it cannot overwrite a change made
// in between.
func (k *KubeLease) HandOver(ctx context.Context, from, to, lsn, request, token string) error {
	l, err := k.get(ctx)
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != from {
		return ErrLeaseLost
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime, l.Spec.LeaseDurationSeconds = &to, &now, &now, k.term()
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[instanceapi.AnnotationLeaseLSN] = lsn
	l.Annotations[instanceapi.AnnotationHandoverLSN] = lsn
	// The vouchers were the old holder's; the new one records its own.
	delete(l.Annotations, instanceapi.AnnotationVouchers)
	// A demotion (token set) records where this primary stopped, in the
	// same write as the handover, and forgets how the Database was last
	// promoted: its next promotion claims, or consumes a token, anew.
	delete(l.Annotations, instanceapi.AnnotationDemotionToken)
	if token != "" {
		l.Annotations[instanceapi.AnnotationDemotionToken] = token
		delete(l.Annotations, instanceapi.AnnotationSourceClaim)
	}
	delete(l.Annotations, instanceapi.AnnotationReleasedBy)
	if request != "" {
		l.Annotations[instanceapi.AnnotationSwitchoverRequest] = request
	}
	if _, err := k.Client.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to hand Lease %s over to %s: %w", k.Name, to, err)
	}
	return nil
}
