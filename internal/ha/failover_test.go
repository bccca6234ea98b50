package ha

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func TestDecideFailover(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	expired := LeaseState{Holder: "db-0", Expires: now.Add(-time.Second), LSN: "0/5000000"}
	withSync := func(record string) LeaseState {
		l := expired
		l.Sync = ParseSync(record)
		return l
	}
	syncLease := withSync(`ANY 1 ("db-1", "db-2")`)
	replica := func(name, received string) v1alpha1.InstanceStatus {
		return v1alpha1.InstanceStatus{Name: name, Role: "replica", ReceivedLSN: received}
	}
	tests := []struct {
		name      string
		lease     LeaseState
		instances []v1alpha1.InstanceStatus
		want      string
		lag       int64
		waiting   string
	}{
		{"a valid lease moves nowhere", LeaseState{Holder: "db-0", Expires: now.Add(time.Second)},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000")}, "", 0, ""},
		{"the replica with the most WAL", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000"), replica("db-2", "0/5000000")}, "db-2", 0, ""},
		{"never a replica fenced on request, however far it got", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000"), {Name: "db-2", Role: "replica", ReceivedLSN: "0/5000000", FencedOnRequest: true}}, "db-1", 0x1000, ""},
		{"the lag against the lease's LSN is recorded", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000")}, "db-1", 0x1000, ""},
		{"released (never renewed) counts as expired", LeaseState{Holder: "db-0"},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1")}, "db-1", 0, ""},
		{"a replica past the bound is never promoted", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "", 0, "lags more than"},
		{"the old holder, primaries and silent instances are no candidates", expired,
			[]v1alpha1.InstanceStatus{replica("db-0", "0/5000000"), {Name: "db-1", Role: "primary", ReceivedLSN: "0/5000000"},
				{Name: "db-2", Role: "replica", Error: "the instance manager did not answer"}}, "", 0, "no replica answers"},
		{"a replica that received nothing since it started ranks by what it replayed", expired,
			[]v1alpha1.InstanceStatus{{Name: "db-1", Role: "replica", LSN: "0/4FFF000"}, replica("db-2", "0/4000000")}, "db-1", 0x1000, ""},
		{"the newest timeline wins over a higher LSN on a timeline a failover left behind", expired,
			[]v1alpha1.InstanceStatus{{Name: "db-1", Role: "replica", ReceivedLSN: "0/4FFF000", Timeline: 3},
				{Name: "db-2", Role: "replica", ReceivedLSN: "0/5000000", Timeline: 2}}, "db-1", 0x1000, ""},
		{"LSNs compare as numbers across the slash", LeaseState{Holder: "db-0"},
			[]v1alpha1.InstanceStatus{replica("db-1", "1/0"), replica("db-2", "0/FFFFFFFF")}, "db-1", 0, ""},
		// Synchronous: 3 instances, each commit flushed on ANY 1 of the 2
		// replicas, so both must answer.
		{"sync: a quorum of replicas answers, the most WAL wins", syncLease,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000"), replica("db-2", "0/4FFFF00")}, "db-2", 0x100, ""},
		{"sync: one replica of a quorum of two may lack an acknowledged commit", syncLease,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000"), {Name: "db-2", Role: "replica", Error: "the instance manager did not answer"}},
			"", 0, "so 2 of them must answer"},
		{"sync: no lag bound, what the best lacks was never acknowledged", withSync(`ANY 1 ("db-1")`),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "db-1", 0x4000000, ""},
		{"sync: an instance outside the named standbys does not count", syncLease,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000"), replica("db-3", "0/5000000")}, "", 0, "and 1 do"},
		{"sync: while the setting changes both must hold", withSync(`ANY 2 ("db-1", "db-2")|ANY 1 ("db-1", "db-2")`),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4000000")}, "", 0, "so 2 of them must answer"},
		{"sync: a change from asynchronous keeps the lag bound", withSync(`|ANY 1 ("db-1", "db-2")`),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "", 0, "lags more than"},
		{"recorded asynchronous keeps the lag bound", withSync(""),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/1000000")}, "", 0, "lags more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideFailover(tt.lease, now, tt.instances)
			if d.Promote != tt.want || d.LagBytes != tt.lag {
				t.Fatalf("promote %q lag %d, want %q lag %d (%s)", d.Promote, d.LagBytes, tt.want, tt.lag, d.Waiting)
			}
			if !strings.Contains(d.Waiting, tt.waiting) || (tt.waiting == "" && d.Waiting != "") {
				t.Fatalf("waiting %q, want it to say %q", d.Waiting, tt.waiting)
			}
		})
	}
}

// Serving through a control-plane outage: a lease whose holder recorded
// vouchers lets only them be promoted; a replica that promised the holder
// holds failover back (the holder may serve on its promise), unless the
// holder released the lease.
func TestDecideFailoverPromises(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	expired := LeaseState{Holder: "db-0", Expires: now.Add(-time.Second), LSN: "0/5000000"}
	vouched := func(names ...string) LeaseState {
		l := expired
		l.HasVouchers, l.Vouchers = true, names
		return l
	}
	replica := func(name, received, promisedTo string) v1alpha1.InstanceStatus {
		return v1alpha1.InstanceStatus{Name: name, Role: "replica", ReceivedLSN: received, PromisedTo: promisedTo}
	}
	sync := vouched("db-1", "db-2")
	sync.Sync = ParseSync(`ANY 1 ("db-1", "db-2")`)
	tests := []struct {
		name       string
		lease      LeaseState
		instances  []v1alpha1.InstanceStatus
		want       string
		onPromises string // a part of OnPromises; "" wants none
		waiting    string // a part of Waiting; "" wants none
	}{
		{"no vouchers recorded: any replica", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000", ""), replica("db-3", "0/5000000", "")}, "db-3", "", ""},
		{"a replica the vouchers do not name is skipped, however much WAL it has", vouched("db-1", "db-2"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/4FFF000", ""), replica("db-3", "0/5000000", "")}, "db-1", "", ""},
		{"with no replica named but ones that are not vouchers, none is promoted", vouched("db-1"),
			[]v1alpha1.InstanceStatus{replica("db-2", "0/5000000", ""), replica("db-3", "0/5000000", "")}, "", "", "no replica answers"},
		{"vouchers recorded empty (a single instance): none is promoted", vouched(),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "")}, "", "", "no replica answers"},
		{"only replicas that promised: the holder serves on their promises", vouched("db-1", "db-2"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/5000000", "db-0")},
			"", "serves on the promises of db-1, db-2", ""},
		{"one replica that promised holds failover, though the other could be promoted", vouched("db-1", "db-2"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/4FFF000", "")},
			"", "serves on the promises of db-1", ""},
		{"a promise holds failover without vouchers too", expired,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/4FFF000", "")},
			"", "serves on the promises of db-1", ""},
		{"one promised, the other no voucher", vouched("db-1"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/5000000", "")},
			"", "serves on the promises of db-1", ""},
		{"one promised, the other silent", vouched("db-1", "db-2"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), {Name: "db-2", Role: "replica", Error: "the instance manager did not answer"}},
			"", "serves on the promises of db-1", ""},
		{"a non-voucher's promise counts for nothing", vouched("db-2"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/4FFF000", "")}, "db-2", "", ""},
		{"a promise to another holder does not hold failover", vouched("db-1", "db-2"),
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-9"), replica("db-2", "0/4FFF000", "")}, "db-1", "", ""},
		{"a promise to a holder that released the lease does not hold failover", LeaseState{Holder: "db-0", LSN: "0/5000000"},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/4FFF000", "")}, "db-1", "", ""},
		{"a valid lease moves nowhere, promises or not", LeaseState{Holder: "db-0", Expires: now.Add(time.Second), HasVouchers: true, Vouchers: []string{"db-1"}},
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "")}, "", "", ""},
		// With a synchronous quorum, too.
		{"sync: the replicas promised", sync,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/5000000", "db-0")},
			"", "serves on the promises of db-1, db-2", ""},
		{"sync: one promised, the other no quorum alone", sync,
			[]v1alpha1.InstanceStatus{replica("db-1", "0/5000000", "db-0"), replica("db-2", "0/5000000", "")},
			"", "serves on the promises of db-1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideFailover(tt.lease, now, tt.instances)
			if d.Promote != tt.want {
				t.Fatalf("promote %q, want %q (waiting %q, on promises %q)", d.Promote, tt.want, d.Waiting, d.OnPromises)
			}
			if !strings.Contains(d.OnPromises, tt.onPromises) || (tt.onPromises == "" && d.OnPromises != "") {
				t.Fatalf("on promises %q, want it to say %q", d.OnPromises, tt.onPromises)
			}
			if !strings.Contains(d.Waiting, tt.waiting) || (tt.waiting == "" && d.Waiting != "") {
				t.Fatalf("waiting %q, want it to say %q", d.Waiting, tt.waiting)
			}
		})
	}
}

// LeaseStateOf reads the vouchers only from a renewed lease: one its
// holder released binds nobody to promises, so any replica may be
// promoted.
func TestLeaseStateOfVouchers(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	renewed := metav1.NewMicroTime(now.Add(-10 * time.Second))
	lease := func(renew *metav1.MicroTime, annotations map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("db-0"), RenewTime: renew, LeaseDurationSeconds: ptr.To(int32(7))}}
	}
	tests := []struct {
		name string
		l    *coordinationv1.Lease
		has  bool
		want []string
	}{
		{"renewed with vouchers", lease(&renewed, map[string]string{instanceapi.AnnotationVouchers: "db-1,db-2"}), true, []string{"db-1", "db-2"}},
		{"spaces and empty entries", lease(&renewed, map[string]string{instanceapi.AnnotationVouchers: " db-1, ,db-2,"}), true, []string{"db-1", "db-2"}},
		{"recorded empty: none", lease(&renewed, map[string]string{instanceapi.AnnotationVouchers: ""}), true, nil},
		{"not recorded (a manager from before promises)", lease(&renewed, nil), false, nil},
		{"released: the vouchers bind nobody", lease(nil, map[string]string{instanceapi.AnnotationVouchers: "db-1"}), false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := LeaseStateOf(tt.l)
			if st.HasVouchers != tt.has || !slices.Equal(st.Vouchers, tt.want) {
				t.Fatalf("HasVouchers %v, Vouchers %q; want %v, %q", st.HasVouchers, st.Vouchers, tt.has, tt.want)
			}
		})
	}
	// Released, so expired at once: db-2, which the vouchers do not name,
	// may be promoted.
	st := LeaseStateOf(lease(nil, map[string]string{instanceapi.AnnotationVouchers: "db-1"}))
	d := DecideFailover(st, now, []v1alpha1.InstanceStatus{{Name: "db-2", Role: "replica", ReceivedLSN: "0/5000000"}})
	if d.Promote != "db-2" {
		t.Fatalf("promote %q from a released lease, want db-2 (waiting %q, on promises %q)", d.Promote, d.Waiting, d.OnPromises)
	}
	// Renewed (and expired), the same lease lets only db-1 be promoted.
	st = LeaseStateOf(lease(&renewed, map[string]string{instanceapi.AnnotationVouchers: "db-1"}))
	if d := DecideFailover(st, now, []v1alpha1.InstanceStatus{{Name: "db-2", Role: "replica", ReceivedLSN: "0/5000000"}}); d.Promote != "" {
		t.Fatalf("promote %q, which the vouchers do not name", d.Promote)
	}
}
