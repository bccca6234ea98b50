package database

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// A planned switch between regions (the protocol is written beside
// instanceapi.DemotionToken). The demoted side: spec.replica set on a
// Database whose Lease an instance holds. The promoted side:
// spec.replica.promotionToken holds its promotion until an instance has
// replayed up to the token.

// demotePhase demotes a Database that spec.replica says follows another
// while one of its instances still holds the primary Lease: the primary
// is asked to stop cleanly and hand the Lease to the source outside
// (its last WAL shipped first), recording its token on the Lease.
// A holder that does not serve (its Lease expired or was released) is
// replaced by the source outside without a token: nothing says where it
// stopped, so the other side's promotion then needs a claim.
func (r *Reconciler) demotePhase(ctx context.Context, db *v1alpha1.Database, obs *observation) (stepResult, error) {
	holder := obs.Primary
	if !following(db) || obs.Lease == nil || holder == "" || holder == instanceapi.ExternalHolder {
		return stepResult{}, nil
	}
	s, answers := obs.Instances[holder]
	if !answers || s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning {
		st := ha.LeaseStateOf(obs.Lease)
		if !st.Expired(obs.now) {
			return stepResult{requeue: st.Expires.Sub(obs.now) + 100*time.Millisecond}, nil
		}
		return stepResult{stop: true, requeue: time.Second}, r.updateLease(ctx, db, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(instanceapi.ExternalHolder), nil
			delete(l.Annotations, instanceapi.AnnotationDemotionToken)
			delete(l.Annotations, instanceapi.AnnotationSourceClaim) // its next promotion claims anew
		})
	}
	token, err := r.apiToken(ctx, db)
	if err != nil {
		return stepResult{}, err
	}
	t, err := r.targetOf(ctx, db, obs, holder)
	if err != nil {
		return stepResult{}, err
	}
	res, err := r.Instances.Demote(ctx, t, token, instanceapi.DemoteRequest{To: instanceapi.ExternalHolder})
	if err != nil {
		return stepResult{}, fmt.Errorf("failed to demote the primary %s: %w", holder, err)
	}
	// The instance recorded its token on the Lease as it handed it over.
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "Demoted", "Demote",
		"The primary %s stopped cleanly at %s on timeline %d; status.replica.demotionToken promotes the other side", holder, res.LSN, s.Timeline)
	return stepResult{stop: true, requeue: time.Second}, nil
}

// updateLease applies change to db's primary Lease as the API server has
// it, with the resourceVersion read: a change in between fails it.
func (r *Reconciler) updateLease(ctx context.Context, db *v1alpha1.Database, change func(*coordinationv1.Lease)) error {
	l := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: leaseName(db)}, l); err != nil {
		return fmt.Errorf("failed to read Lease %s: %w", leaseName(db), err)
	}
	change(l)
	if err := r.Client.Update(ctx, l); err != nil {
		return fmt.Errorf("failed to update Lease %s: %w", l.Name, err)
	}
	return nil
}

// demotionToken is the token a demoted db's Lease records, "" otherwise.
func demotionToken(db *v1alpha1.Database, obs *observation) string {
	if !following(db) || obs.Lease == nil {
		return ""
	}
	return obs.Lease.Annotations[instanceapi.AnnotationDemotionToken]
}

// promotionHeld says why a promotion with spec.replica.promotionToken
// waits: no instance has replayed up to the token yet ("" once one has,
// and for any other Database).
func promotionHeld(db *v1alpha1.Database, obs *observation) string {
	rp := db.Spec.Replica
	if rp == nil || rp.Enabled || rp.PromotionToken == "" || obs.Primary != instanceapi.ExternalHolder {
		return ""
	}
	tok, err := instanceapi.ParseDemotionToken(rp.PromotionToken)
	if err != nil {
		return "spec.replica.promotionToken: " + err.Error()
	}
	want, ok := postgres.ParseLSN(tok.LSN)
	if !ok {
		return fmt.Sprintf("spec.replica.promotionToken: %q is not an LSN", tok.LSN)
	}
	best := "none has replayed any"
	for _, s := range obs.InstanceStatuses {
		lsn, ok := postgres.ParseLSN(s.LSN)
		if !ok || s.Error != "" {
			continue
		}
		// The LSN alone: a standby reports the timeline of its last
		// restartpoint, which lags the one it replays (one that replayed
		// a switch of the source's, a round trip's, reports the old
		// one), and what it follows is the source's history.
		if lsn >= want {
			return ""
		}
		best = fmt.Sprintf("%s is at %s on timeline %d", s.Name, s.LSN, s.Timeline)
	}
	return fmt.Sprintf("the promotion waits until an instance has replayed the demoted %s up to %s (timeline %d; spec.replica.promotionToken); %s",
		tok.Database, tok.LSN, tok.Timeline, best)
}
