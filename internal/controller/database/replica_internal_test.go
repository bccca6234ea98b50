package database

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/ha"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// A replica Database's status comes from its most advanced instance, the
// first by name of equals (a status that picked one at random would be
// written again and again), with the lag to the source's end it knows.
func TestReplicaStatusIsTheMostAdvancedInstances(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	committed := now.Add(-30 * time.Second)
	db := &v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{Replica: &v1alpha1.DatabaseReplica{Enabled: true}}}
	at := func(lsn, end string, streaming bool) instanceapi.Status {
		return instanceapi.Status{LSN: lsn, Source: &instanceapi.SourceProgress{EndLSN: end, Streaming: streaming, ReplayedTime: &committed}}
	}
	for range 20 {
		obs := &observation{now: now, View: ha.View{Instances: map[string]instanceapi.Status{
			"dr-0": at("0/5000000", "0/6000000", false), "dr-1": at("0/5000000", "0/5000000", true), "dr-2": at("0/4000000", "0/6000000", true)}}}
		got := replicaStatus(db, obs)
		if got.PromotableLSN != "0/5000000" || got.Streaming || got.LagBytes != 16<<20 || got.LagSeconds != 30 || !got.PromotableTime.Time.Equal(committed) {
			t.Fatalf("status %+v, want dr-0's: 0/5000000 from the archive, 16 MiB and 30 s behind", got)
		}
	}
}

// A promotion with spec.replica.promotionToken waits until an instance
// has replayed up to the token's LSN on the token's timeline; a token
// that does not parse says so, naming the field; without a token, or
// while following, nothing waits on it.
func TestPromotionWaitsForItsToken(t *testing.T) {
	tok := instanceapi.DemotionToken{Database: "region-a/orders", Timeline: 1, LSN: "0/5000028"}.Encode()
	db := func(enabled bool, token string) *v1alpha1.Database {
		return &v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{Replica: &v1alpha1.DatabaseReplica{Enabled: enabled, PromotionToken: token}}}
	}
	obs := func(lsn string, timeline int32) *observation {
		return &observation{View: ha.View{Primary: instanceapi.ExternalHolder,
			InstanceStatuses: []v1alpha1.InstanceStatus{{Name: "orders-0", Role: "replica", LSN: lsn, Timeline: timeline}}}}
	}
	for _, c := range []struct {
		name string
		db   *v1alpha1.Database
		obs  *observation
		want string // a part of the reason; "" for none
	}{
		{"behind the token", db(false, tok), obs("0/5000000", 1), "up to 0/5000028 (timeline 1"},
		{"at the token", db(false, tok), obs("0/5000028", 1), ""},
		{"past it", db(false, tok), obs("0/6000000", 1), ""},
		// A standby reports its last restartpoint's timeline, which lags.
		{"past it, reporting an earlier timeline", db(false, tok), obs("0/6000000", 0), ""},
		{"behind it on a later timeline", db(false, tok), obs("0/4000000", 2), "orders-0 is at 0/4000000 on timeline 2"},
		{"a token that does not parse", db(false, "not-a-token"), obs("0/6000000", 1), "spec.replica.promotionToken: not a demotion token"},
		{"no token", db(false, ""), obs("0/1000000", 1), ""},
		{"still following", db(true, tok), obs("0/1000000", 1), ""},
	} {
		got := promotionHeld(c.db, c.obs)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: held %q, want %q", c.name, got, c.want)
		}
	}
	if t2, err := instanceapi.ParseDemotionToken(tok); err != nil || t2.LSN != "0/5000028" || t2.Timeline != 1 || t2.Database != "region-a/orders" {
		t.Errorf("the token does not read back: %+v, %v", t2, err)
	}
}
