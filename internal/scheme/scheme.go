// Package scheme is the runtime scheme of every daytwo client: the
// built-in Kubernetes kinds and daytwo's own. It links no controller, so
// the kubectl plugin and the tests' clients stay light.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// New returns a scheme with the built-in Kubernetes kinds and daytwo's own.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}
