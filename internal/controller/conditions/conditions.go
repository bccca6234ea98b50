package conditions

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// wait and kpt read): Reconciling while daytwo works toward the spec,
// Stalled when it cannot without a change from someone. They are present
// only while True, as kstatus recommends for such "abnormal-true"
// conditions: a Ready object, or one at rest where it was asked to be
// (hibernated, paused, fenced, suspended; kstatus then reads its
// Ready=False as in progress), carries neither, and the cache holds
// nothing more for it.
const (
	Reconciling = "Reconciling"
	Stalled     = "Stalled"
)

// stalledReasons are Ready=False reasons that no waiting cures: a spec, a
// reference, an image, a volume or a key that someone must fix.
var stalledReasons = map[string]bool{
	"InvalidSpec": true, "MissingReference": true, "ConflictingResource": true, "DatabaseNotFound": true,
	"ImagePullFailed": true, "ContainerConfigError": true, "CrashLoopBackOff": true, "OOMKilled": true,
	"PodSecurityViolation": true, "ProgressDeadlineExceeded": true, "RestoreFailed": true, "ImportFailed": true,
	"DataConflict": true, "MajorUpgradeFailed": true, "ShrinkUnsupported": true, "ExpansionUnsupported": true,
	"EncryptionKeyUnusable": true, "SeriesKeyUnusable": true, "SeriesInUse": true, "BackupFailed": true,
}

// restingReasons are Ready=False reasons of a state that was asked for.
var restingReasons = map[string]bool{
	"Hibernated": true, "ReconcilePaused": true, "FencedOnRequest": true, "Suspended": true, "DatabaseHibernated": true,
}

// Summarize sets Reconciling and Stalled from the Ready condition, so that
// a tool that knows nothing of daytwo's reasons sees a failing object as
// failing and a working one as in progress. Without Ready (a first
// reconcile cut short) the object is reconciling.
func Summarize(conds *[]metav1.Condition, gen int64) {
	ready := meta.FindStatusCondition(*conds, "Ready")
	var reconciling, stalled bool
	reason, message := "Reconciling", ""
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
	}{{Reconciling, reconciling}, {Stalled, stalled}} {
		if c.on {
			Set(conds, gen, c.typ, metav1.ConditionTrue, reason, message)
		} else {
			meta.RemoveStatusCondition(conds, c.typ)
		}
	}
}
