package ha

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func TestDecideSwitchover(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	valid := LeaseState{Holder: "db-0", Expires: now.Add(5 * time.Second)}
	primary := v1alpha1.InstanceStatus{Name: "db-0", Role: "primary", LSN: "0/5000000"}
	streaming := func(name, received string) v1alpha1.InstanceStatus {
		return v1alpha1.InstanceStatus{Name: name, Role: "replica", ReceivedLSN: received, Streaming: true}
	}
	three := []string{"db-0", "db-1", "db-2"}
	tests := []struct {
		name      string
		req       switchoverRequest
		lease     LeaseState
		pods      []string
		instances []v1alpha1.InstanceStatus
		to        string
		wait      string // a part of the reason
		refuse    string
		already   bool
	}{
		{"the best streaming replica", switchoverRequest{at: now}, valid, three,
			[]v1alpha1.InstanceStatus{primary, streaming("db-1", "0/4FFF000"), streaming("db-2", "0/5000000")}, "db-2", "", "", false},
		{"a named replica, even if another holds more", switchoverRequest{at: now, to: "db-1"}, valid, three,
			[]v1alpha1.InstanceStatus{primary, streaming("db-1", "0/4FFF000"), streaming("db-2", "0/5000000")}, "db-1", "", "", false},
		{"the named instance already is the primary", switchoverRequest{at: now, to: "db-0"}, valid, three,
			[]v1alpha1.InstanceStatus{primary}, "db-0", "", "", true},
		{"no such instance", switchoverRequest{at: now, to: "db-7"}, valid, three,
			[]v1alpha1.InstanceStatus{primary}, "", "", "no instance is named db-7", false},
		{"an expired lease: a failover's turn, never a switchover's", switchoverRequest{at: now},
			LeaseState{Holder: "db-0", Expires: now.Add(-time.Second)}, three,
			[]v1alpha1.InstanceStatus{primary, streaming("db-1", "0/5000000")}, "db-1", "no primary holds a valid lease", "", false},
		{"a named replica that does not stream waits", switchoverRequest{at: now, to: "db-1"}, valid, three,
			[]v1alpha1.InstanceStatus{primary, {Name: "db-1", Role: "replica", ReceivedLSN: "0/5000000"}}, "db-1", "db-1 does not stream", "", false},
		{"a replica too far behind waits", switchoverRequest{at: now}, valid, three,
			[]v1alpha1.InstanceStatus{primary, streaming("db-1", "0/1000000")}, "", "no replica streams", "", false},
		{"the primary must answer", switchoverRequest{at: now}, valid, three,
			[]v1alpha1.InstanceStatus{{Name: "db-0", Error: "the instance manager did not answer"}, streaming("db-1", "0/5000000")},
			"db-1", "the primary db-0 does not answer", "", false},
		{"one instance has no one to switch to", switchoverRequest{at: now}, valid, []string{"db-0"},
			[]v1alpha1.InstanceStatus{primary}, "", "", "one instance", false},
		{"waiting too long refuses", switchoverRequest{at: now.Add(-SwitchoverPatience - time.Second)}, valid, three,
			[]v1alpha1.InstanceStatus{primary, streaming("db-1", "0/1000000")}, "", "", "waited 5m0s: no replica streams", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideSwitchover(tc.req, tc.lease, now, tc.pods, tc.instances)
			if d.alreadyThere != tc.already || (tc.refuse == "" && d.to != tc.to) {
				t.Errorf("to %q already %v, want %q %v (%+v)", d.to, d.alreadyThere, tc.to, tc.already, d)
			}
			if (tc.wait == "") != (d.wait == "") || !strings.Contains(d.wait, tc.wait) {
				t.Errorf("wait %q, want %q", d.wait, tc.wait)
			}
			if (tc.refuse == "") != (d.refuse == "") || !strings.Contains(d.refuse, tc.refuse) {
				t.Errorf("refuse %q, want %q", d.refuse, tc.refuse)
			}
		})
	}
}

func TestPendingSwitchoverIsAnsweredOnce(t *testing.T) {
	at := "2026-11-23T12:00:00Z"
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		v1alpha1.AnnotationSwitchoverRequested: at, v1alpha1.AnnotationSwitchoverTo: "db-1"}}}
	lease := &coordinationv1.Lease{}
	if req, _, ok := pendingSwitchover(db, lease); !ok || req.to != "db-1" {
		t.Fatalf("a new request is not pending: %+v %v", req, ok)
	}
	// Answered in the status, or recorded on the lease by the handover (a
	// status write lost after it): not pending again.
	answered := db.DeepCopy()
	answered.Status.LastSwitchover = &v1alpha1.SwitchoverRecord{RequestedTime: metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))}
	if _, _, ok := pendingSwitchover(answered, lease); ok {
		t.Error("a request answered in the status is pending again")
	}
	handed := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{instanceapi.AnnotationSwitchoverRequest: at}}}
	if _, _, ok := pendingSwitchover(db, handed); ok {
		t.Error("a request the lease records as handed over is pending again")
	}
	bad := db.DeepCopy()
	bad.Annotations[v1alpha1.AnnotationSwitchoverRequested] = "now"
	_, msg, ok := pendingSwitchover(bad, lease)
	if !ok || !strings.Contains(msg, "RFC 3339") {
		t.Errorf("an unparseable time: %q %v", msg, ok)
	}
	bad.Status.LastSwitchover = &v1alpha1.SwitchoverRecord{Result: v1alpha1.SwitchoverRefused, Message: msg}
	if _, _, ok := pendingSwitchover(bad, lease); ok {
		t.Error("an unparseable time already refused is answered again (a reconcile loop)")
	}
}
