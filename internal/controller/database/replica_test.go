package database_test

import (
	"encoding/json"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

func replicaOf(prefix string) *v1alpha1.DatabaseReplica {
	return &v1alpha1.DatabaseReplica{Enabled: true, Source: v1alpha1.ReplicaSource{
		Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: "minio.region-a:9000", Bucket: "wal", Prefix: prefix,
			CredentialsSecretRef: &v1alpha1.S3CredentialsSecretRef{Name: "s3"}}},
		SeriesKeySecretRef: v1alpha1.SecretKeyRef{Name: "orders-series-key"}}}
}

// A replica Database: its Lease names the source outside, so no instance
// is primary; its instances get the source's archive (config and
// credentials); it says it follows. Setting enabled to false starts the promotion, which waits
// for an instance to answer. The rules around it are refused by the API
// server, naming the field.
func TestReplicaDatabaseFollowsUntilPromoted(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "dr", func(d *v1alpha1.Database) {
		d.Spec.Replica = replicaOf("region-a/orders-backup")
	}))
	db := waitCondition(t, ns, "dr", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonFollowingSource)
	if db.Status.Phase != v1alpha1.DatabasePhaseReplica || db.Status.Replica == nil || db.Status.Replica.Source != "s3://minio.region-a:9000/wal/region-a/orders-backup/" {
		t.Fatalf("status %s, replica %+v", db.Status.Phase, db.Status.Replica)
	}
	if db.Status.Primary != "" {
		t.Fatalf("a replica Database reports primary %q", db.Status.Primary)
	}
	lease, err := get(ns, "dr-primary", &coordinationv1.Lease{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != instanceapi.ExternalHolder {
		t.Fatalf("lease %+v, %v", lease.Spec, err)
	}
	cm, err := get(ns, "dr-config", &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var src instanceapi.ReplicaSource
	if err := json.Unmarshal([]byte(cm.Data[instanceapi.ReplicaSourceFile]), &src); err != nil || src.Prefix != "region-a/orders-backup/" || src.S3 == nil || src.S3.Bucket != "wal" {
		t.Fatalf("replica source %q: %v", cm.Data[instanceapi.ReplicaSourceFile], err)
	}
	sts := waitStatefulSet(t, ns, "dr")
	projected := map[string]bool{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				for _, it := range s.Secret.Items {
					projected[it.Path] = true
				}
			}
		}
	}
	for _, f := range []string{instanceapi.SourceFiles.SeriesKey, instanceapi.SourceFiles.AccessKeyID, instanceapi.SourceFiles.SecretAccessKey} {
		if !projected[f] {
			t.Errorf("the instances do not get %s: %v", f, projected)
		}
	}

	// Refused, each naming its field.
	for _, tc := range []struct {
		name, want string
		mutate     func(*v1alpha1.Database)
	}{
		{"removed", "spec.replica cannot be removed", func(d *v1alpha1.Database) { d.Spec.Replica = nil }},
		{"no prefix", "an s3 bucket with the prefix", func(d *v1alpha1.Database) { d.Spec.Replica.Source.Storage.S3.Prefix = "" }},
		{"host without password", "replicationPasswordSecretRef", func(d *v1alpha1.Database) { d.Spec.Replica.Source.Host = "orders-rw.region-a" }},
	} {
		err := change(t, ns, "dr", tc.mutate)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	plain := newDB(ns, "plain")
	create(t, plain)
	if err := change(t, ns, "plain", func(d *v1alpha1.Database) { d.Spec.Replica = replicaOf("x"); d.Spec.Replica.Enabled = false }); err == nil ||
		!strings.Contains(err.Error(), "demotes it, so enabled must be true") {
		t.Errorf("a running Database made a promoted replica: %v", err)
	}
	// Demoted: with no primary that serves (none runs here), the Lease
	// goes to the source outside without a token, and the Database
	// follows.
	if err := change(t, ns, "plain", func(d *v1alpha1.Database) { d.Spec.Replica = replicaOf("x") }); err != nil {
		t.Fatalf("demoting a Database: %v", err)
	}
	eventually(t, "the demoted Database's Lease held by the source outside", func() (bool, error) {
		l, err := get(ns, "plain-primary", &coordinationv1.Lease{})
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == instanceapi.ExternalHolder && l.Annotations[instanceapi.AnnotationDemotionToken] == "", err
	})
	waitCondition(t, ns, "plain", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonFollowingSource)
	if err := env.Client.Create(ctx, newDB(ns, "both", func(d *v1alpha1.Database) {
		d.Spec.Replica = replicaOf("x")
		d.Spec.Bootstrap = &v1alpha1.DatabaseBootstrap{FromBackup: &v1alpha1.BootstrapFromBackup{BackupRef: v1alpha1.LocalObjectReference{Name: "b"}}}
	})); err == nil || !strings.Contains(err.Error(), "spec.bootstrap") {
		t.Errorf("a replica restored from a backup: %v", err)
	}

	// The promotion: declared, then carried out by failover once an
	// instance answers.
	// Unclaimed: the Lease says so to the instance that is promoted.
	update(t, db, func(d *v1alpha1.Database) {
		d.Spec.Replica.Enabled, d.Spec.Replica.Promotion = false, v1alpha1.ReplicaPromotionUnclaimed
	})
	db = waitCondition(t, ns, "dr", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPromoting)
	eventually(t, "the claim waived on the Lease", func() (bool, error) {
		l, err := get(ns, "dr-primary", &coordinationv1.Lease{})
		return err == nil && l.Annotations[instanceapi.AnnotationSourceClaim] == instanceapi.SourceClaimWaived, err
	})
	if db.Status.Phase == v1alpha1.DatabasePhaseReplica {
		t.Fatalf("promoting: phase %s, %+v", db.Status.Phase, condition(db, v1alpha1.ConditionReady))
	}
}

// change updates the Database as stored with mutate, and returns what
// the API server said (a conflict with the operator's own write is tried
// again).
func change(t *testing.T, ns, name string, mutate func(*v1alpha1.Database)) error {
	t.Helper()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := get(ns, name, &v1alpha1.Database{})
		if err != nil {
			return err
		}
		mutate(d)
		return env.Client.Update(ctx, d)
	})
}
