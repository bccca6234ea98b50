package database

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// restartAskedHold is how long an asked restart in place is not asked
// again while the instance does not yet report the new start.
const restartAskedHold = 15 * time.Second

// inPlaceState is the operator's memory of what it decided about revisions
// (immutable, so the answer holds) and of the restarts it asked for.
type inPlaceState struct {
	mu sync.Mutex
	// revisions: (namespace, from, to) -> what settingsOnlyChange found.
	revisions map[[3]string]revisionChange
	// asked: pod UID -> when its restart in place was asked.
	asked map[types.UID]time.Time
	// silent: pod UID -> since when its instance manager has not answered.
	silent map[types.UID]time.Time
}

// silentPatience is how long an instance manager the operator cannot reach
// is waited for before its pod is replaced instead of restarted in place:
// long enough for a restart under way, a slow start or a blip of the
// network; a pod that stays ready but unreachable (a network policy, a
// certificate the operator no longer trusts) is replaced, as before
// restarts in place, which also gives it new certificates.
const silentPatience = 2 * time.Minute

// silentFor records that pod uid's instance manager did not answer (known
// false) or did, and says for how long it has not.
func (s *inPlaceState) silentFor(uid types.UID, known bool, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if known {
		delete(s.silent, uid)
		return 0
	}
	if s.silent == nil || len(s.silent) >= cachedRevisions {
		s.silent = map[types.UID]time.Time{}
	}
	since, ok := s.silent[uid]
	if !ok {
		s.silent[uid], since = now, now
	}
	return now.Sub(since)
}

// revisionChange is how the pod template of one ControllerRevision differs
// from another's: settingsOnly when only in annRestartParameters, whose
// value in the newer one is params.
type revisionChange struct {
	settingsOnly bool
	params       string
}

// cachedRevisions bounds inPlaceState.revisions; it starts over when full.
const cachedRevisions = 512

func (s *inPlaceState) known(key [3]string) (revisionChange, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.revisions[key]
	return v, ok
}

func (s *inPlaceState) remember(key [3]string, v revisionChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revisions == nil || len(s.revisions) >= cachedRevisions {
		s.revisions = map[[3]string]revisionChange{}
	}
	s.revisions[key] = v
}

// askedRecently reports whether pod's restart was asked within hold, and
// forgets asks older than that.
func (s *inPlaceState) askedRecently(uid types.UID, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.asked {
		if now.Sub(at) >= restartAskedHold {
			delete(s.asked, k)
		}
	}
	_, ok := s.asked[uid]
	return ok
}

func (s *inPlaceState) ask(uid types.UID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asked == nil {
		s.asked = map[types.UID]time.Time{}
	}
	s.asked[uid] = now
}
