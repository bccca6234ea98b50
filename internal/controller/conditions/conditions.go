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
