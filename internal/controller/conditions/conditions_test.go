package conditions_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
)

// What kstatus (the library Flux's wait and kpt use) makes of a daytwo
// object, for each kind of Ready condition: the Reconciling and Stalled
// conditions Summarize derives must read as the Ready condition means.
func TestKstatusReadsTheSummary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ready  *metav1.Condition
		status status.Status
	}{
		{"ready", &metav1.Condition{Status: metav1.ConditionTrue, Reason: "Available"}, status.CurrentStatus},
		{"working", &metav1.Condition{Status: metav1.ConditionFalse, Reason: "RollingOut", Message: "2 of 3 pods updated"}, status.InProgressStatus},
		{"a spec someone must fix", &metav1.Condition{Status: metav1.ConditionFalse, Reason: "InvalidSpec", Message: "spec.schedule: bad"}, status.FailedStatus},
		{"a missing Secret", &metav1.Condition{Status: metav1.ConditionFalse, Reason: "MissingReference", Message: "Secret s3 not found"}, status.FailedStatus},
		// Neither reconciling nor stalled: kstatus falls back on Ready=False.
		{"hibernated as asked", &metav1.Condition{Status: metav1.ConditionFalse, Reason: "Hibernated"}, status.InProgressStatus},
		{"no Ready yet", nil, status.InProgressStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conds []metav1.Condition
			if tc.ready != nil {
				r := *tc.ready
				r.Type = "Ready"
				conds = append(conds, r)
			}
			conditions.Summarize(&conds, 3)
			// The object as the API server serves it, observed at its generation.
			obj := map[string]any{"apiVersion": "daytwo.dev/v1alpha1", "kind": "Database",
				"metadata": map[string]any{"name": "orders", "namespace": "shop", "generation": int64(3)}}
			st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
				ObservedGeneration int64              `json:"observedGeneration"`
				Conditions         []metav1.Condition `json:"conditions"`
			}{3, conds})
			if err != nil {
				t.Fatal(err)
			}
			obj["status"] = st
			res, err := status.Compute(&unstructured.Unstructured{Object: obj})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status {
				t.Fatalf("kstatus says %s (%s), want %s; conditions %+v", res.Status, res.Message, tc.status, conds)
			}
		})
	}
}
