package database

import (
	"context"
	"errors"
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// runSteps runs the steps in order, comes back as soon as any asked, and
// ends at the first that stops the reconcile or fails.
func TestRunStepsMergesOneWay(t *testing.T) {
	var ran []string
	stepOf := func(name string, res stepResult, err error) step {
		return step{name, func(context.Context, *v1alpha1.Database, *observation) (stepResult, error) {
			ran = append(ran, name)
			return res, err
		}}
	}
	r := &Reconciler{}
	ctx, db := context.Background(), &v1alpha1.Database{}

	res, err := r.runSteps(ctx, db, &observation{}, []step{
		stepOf("a", stepResult{requeue: time.Minute}, nil), stepOf("b", stepResult{}, nil), stepOf("c", stepResult{requeue: 5 * time.Second}, nil),
	})
	if err != nil || res.RequeueAfter != 5*time.Second || len(ran) != 3 {
		t.Fatalf("all ran: %v %v, ran %v; want 5s after a, b, c", res, err, ran)
	}

	ran = nil
	res, err = r.runSteps(ctx, db, &observation{}, []step{
		stepOf("a", stepResult{requeue: time.Second}, nil), stepOf("stop", stopIf(true, time.Minute), nil), stepOf("never", stepResult{}, nil),
	})
	if err != nil || res.RequeueAfter != time.Minute || len(ran) != 2 {
		t.Fatalf("stopped: %v %v, ran %v; want the stopping step's own minute after a, stop", res, err, ran)
	}

	ran = nil
	boom := errors.New("boom")
	res, err = r.runSteps(ctx, db, &observation{}, []step{stepOf("fail", stepResult{requeue: time.Second}, boom), stepOf("never", stepResult{}, nil)})
	if !errors.Is(err, boom) || res.RequeueAfter != 0 || len(ran) != 1 {
		t.Fatalf("failed: %v %v, ran %v", res, err, ran)
	}
	if stopIf(false, time.Minute) != (stepResult{}) {
		t.Error("a step that does not stop asked for a delay")
	}
}
