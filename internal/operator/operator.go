package operator

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/internal/controller/databasebackup"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
)

// NewScheme returns a scheme with the built-in Kubernetes kinds and daytwo's own.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// CacheOptions are the informer cache settings every daytwo manager uses.
// Managed fields are dropped from cached objects: daytwo never reads them,
// and they are often the largest part of a Deployment.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}

// SetupControllers wires one controller per kind into mgr.
func SetupControllers(ctx context.Context, mgr manager.Manager) error {
	c := mgr.GetClient()
	wa := &webapp.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("daytwo")}
	if err := wa.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("failed to set up the WebApp controller: %w", err)
	}
	if err := (&database.Reconciler{Client: c}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the Database controller: %w", err)
	}
	if err := (&databasebackup.Reconciler{Client: c}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the DatabaseBackup controller: %w", err)
	}
	return nil
}
