package database

import (
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
