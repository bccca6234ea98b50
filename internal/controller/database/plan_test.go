package database

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

func TestPlanTiers(t *testing.T) {
	tests := []struct {
		name          string
		db            *v1alpha1.Database
		instances     int32
		cpuReq, mem   string
		storage       string
		sharedBuffers string
		image         string
	}{
		{"small", newDB(), 1, "250m", "1Gi", "10Gi", "256MB", postgres.DefaultImage("15")},
		{"medium", newDB(func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeMedium }), 2, "500m", "4Gi", "50Gi", "1GB", postgres.DefaultImage("15")},
		{"large", newDB(func(d *v1alpha1.Database) { d.Spec.Size = v1alpha1.SizeLarge }), 3, "1", "16Gi", "200Gi", "4GB", postgres.DefaultImage("15")},
		{"explicit overrides win", newDB(func(d *v1alpha1.Database) {
			d.Spec.Size = v1alpha1.SizeLarge
			d.Spec.Instances = ptr.To[int32](1)
			d.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}
			d.Spec.Storage = &v1alpha1.DatabaseStorage{Size: ptr.To(resource.MustParse("2Gi"))}
			d.Spec.Image = "localhost/postgres:15-next"
		}), 1, "100m", "512Mi", "2Gi", "128MB", "localhost/postgres:15-next"},
		{"user parameter wins", newDB(func(d *v1alpha1.Database) { d.Spec.Parameters = map[string]string{"shared_buffers": "300MB"} }),
			1, "250m", "1Gi", "10Gi", "300MB", postgres.DefaultImage("15")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlan(tt.db)
			if p.instances != tt.instances {
				t.Errorf("instances = %d, want %d", p.instances, tt.instances)
			}
			if got := p.resources.Requests.Cpu(); got.Cmp(resource.MustParse(tt.cpuReq)) != 0 {
				t.Errorf("cpu request = %s, want %s", got, tt.cpuReq)
			}
			if got := p.resources.Requests.Memory(); got.Cmp(resource.MustParse(tt.mem)) != 0 {
				t.Errorf("memory request = %s, want %s", got, tt.mem)
			}
			if p.storage.Cmp(resource.MustParse(tt.storage)) != 0 {
				t.Errorf("storage = %s, want %s", p.storage.String(), tt.storage)
			}
			if p.image != tt.image {
				t.Errorf("image = %s, want %s", p.image, tt.image)
			}
			i := slices.IndexFunc(p.params, func(e postgres.Effective) bool { return e.Name == "shared_buffers" })
			if i < 0 {
				t.Errorf("no shared_buffers among %d parameters, want %s", len(p.params), tt.sharedBuffers)
			} else if got := p.params[i].Value; got != tt.sharedBuffers {
				t.Errorf("shared_buffers = %s, want %s", got, tt.sharedBuffers)
			}
		})
	}
}
