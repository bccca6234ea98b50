package scheme_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/scheme"
)

// The scheme knows daytwo's kinds and the built-in ones its clients read.
func TestNewKnowsBothKinds(t *testing.T) {
	s := scheme.New()
	for _, obj := range []runtime.Object{&v1alpha1.Database{}, &v1alpha1.WebApp{}, &v1alpha1.DatabaseBackup{}, &appsv1.StatefulSet{}} {
		if _, _, err := s.ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
}
