package database

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// A setting daytwo manages is refused by the controller too (a CRD not
// yet upgraded lets it through), naming the field; others pass.
func TestValidateRefusesManagedParameters(t *testing.T) {
	db := &v1alpha1.Database{Spec: v1alpha1.DatabaseSpec{Version: "17",
		Parameters: v1alpha1.Parameters{"work_mem": "64MB", "ssl_key_file": "/tmp/k", "archive_command": "true"}}}
	got := validate(db, newPlan(db))
	if !strings.Contains(got, "spec.parameters.archive_command is a setting daytwo manages") {
		t.Errorf("validate = %q, want the first managed setting named", got)
	}
	db.Spec.Parameters = v1alpha1.Parameters{"work_mem": "64MB"}
	if got := validate(db, newPlan(db)); got != "" {
		t.Errorf("validate = %q for a setting daytwo does not manage", got)
	}
}

func TestValidate(t *testing.T) {
	if msg := validate(newDB(func(d *v1alpha1.Database) { d.Spec.Image = "postgres:16.2" }), newPlan(newDB(func(d *v1alpha1.Database) { d.Spec.Image = "postgres:16.2" }))); !strings.Contains(msg, "spec.image") {
		t.Errorf("image of another major accepted: %q", msg)
	}
	noMem := newDB(func(d *v1alpha1.Database) {
		d.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	})
	if msg := validate(noMem, newPlan(noMem)); !strings.Contains(msg, "spec.resources") {
		t.Errorf("resources without memory accepted: %q", msg)
	}
	if msg := validate(newDB(), newPlan(newDB())); msg != "" {
		t.Errorf("valid spec refused: %s", msg)
	}
	// The small tier runs one instance: no replica can confirm a commit.
	syncSmall := newDB(func(d *v1alpha1.Database) {
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 1}}
	})
	if msg := validate(syncSmall, newPlan(syncSmall)); !strings.Contains(msg, "spec.replication.synchronous.number") {
		t.Errorf("synchronous replication on one instance accepted: %q", msg)
	}
	syncLarge := newDB(func(d *v1alpha1.Database) {
		d.Spec.Size = v1alpha1.SizeLarge
		d.Spec.Replication = &v1alpha1.DatabaseReplication{Synchronous: &v1alpha1.SynchronousReplication{Number: 1,
			DataDurability: v1alpha1.DataDurabilityRequired}}
	})
	p := newPlan(syncLarge)
	if msg := validate(syncLarge, p); msg != "" {
		t.Errorf("synchronous replication on %d instances refused: %s", p.instances, msg)
	}
	if got := p.replicationConf(syncLarge); got != `{"instances":["orders-0","orders-1","orders-2"],"synchronous":1,"required":true}` {
		t.Errorf("replication file %s", got)
	}
	requestOnly := newDB(func(d *v1alpha1.Database) {
		d.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
	})
	if l := newPlan(requestOnly).resources.Limits; l.Memory().String() != "2Gi" {
		t.Errorf("a 2Gi request without a limit got limits %v", l)
	}
}
