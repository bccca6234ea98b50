package conditions

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Set records a condition for generation gen. The transition time only moves
// when the status changes, so rewriting the same observation is a no-op.
func Set(conds *[]metav1.Condition, gen int64, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		ObservedGeneration: gen,
		Reason:             reason,
		Message:            message,
	})
}

// The kstatus conditions (sigs.k8s.io/cli-utils' kstatus, which Flux's
// wait and kpt read), Reconciling and Stalled, are present only while
// True, as kstatus recommends for such "abnormal-true" conditions: a Ready
// object, or one at rest where it was asked to be (hibernated, paused,
// fenced, suspended; kstatus then reads its Ready=False as in progress),
// carries neither, and the cache holds nothing more for it.
// stalledReasons are Ready=False reasons that no waiting cures: a spec, a
// reference, an image, a volume or a key that someone must fix.
var stalledReasons = map[string]bool{
	v1alpha1.ReasonInvalidSpec: true, v1alpha1.ReasonMissingReference: true, v1alpha1.ReasonConflictingResource: true, v1alpha1.ReasonDatabaseNotFound: true,
	v1alpha1.ReasonImagePullFailed: true, v1alpha1.ReasonContainerConfigError: true, v1alpha1.ReasonCrashLoopBackOff: true, v1alpha1.ReasonOOMKilled: true,
	v1alpha1.ReasonPodSecurityViolation: true, v1alpha1.ReasonProgressDeadlineExceeded: true, v1alpha1.ReasonRestoreFailed: true, v1alpha1.ReasonImportFailed: true,
	v1alpha1.ReasonDataConflict: true, v1alpha1.ReasonMajorUpgradeFailed: true, v1alpha1.ReasonShrinkUnsupported: true, v1alpha1.ReasonExpansionUnsupported: true,
	v1alpha1.ReasonEncryptionKeyUnusable: true, v1alpha1.ReasonSeriesKeyUnusable: true, v1alpha1.ReasonSeriesInUse: true, v1alpha1.ReasonBackupFailed: true,
}

// restingReasons are Ready=False reasons of a state that was asked for.
var restingReasons = map[string]bool{
	v1alpha1.ReasonHibernated: true, v1alpha1.ReasonReconcilePaused: true, v1alpha1.ReasonFencedOnRequest: true, v1alpha1.ReasonSuspended: true, v1alpha1.ReasonDatabaseHibernated: true,
}

// Summarize sets Reconciling and Stalled from the Ready condition, so that
// a tool that knows nothing of daytwo's reasons sees a failing object as
// failing and a working one as in progress. Without Ready (a first
// reconcile cut short) the object is reconciling.
func Summarize(conds *[]metav1.Condition, gen int64) {
	ready := meta.FindStatusCondition(*conds, v1alpha1.ConditionReady)
	var reconciling, stalled bool
	reason, message := v1alpha1.ReasonReconciling, ""
	switch {
	case ready == nil:
		reconciling = true
	case ready.Status == metav1.ConditionTrue, restingReasons[ready.Reason]:
	case stalledReasons[ready.Reason]:
		stalled, reason, message = true, ready.Reason, ready.Message
	default:
		reconciling, reason, message = true, ready.Reason, ready.Message
	}
	for _, c := range []struct {
		typ string
		on  bool
	}{{v1alpha1.ConditionReconciling, reconciling}, {v1alpha1.ConditionStalled, stalled}} {
		if c.on {
			Set(conds, gen, c.typ, metav1.ConditionTrue, reason, message)
		} else {
			meta.RemoveStatusCondition(conds, c.typ)
		}
	}
}
