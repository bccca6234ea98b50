package operator

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/database"
	"github.com/daytwo-dev/daytwo/internal/controller/databasebackup"
	"github.com/daytwo-dev/daytwo/internal/controller/webapp"
	"github.com/daytwo-dev/daytwo/internal/version"
)

// CacheOptions are the informer cache settings every daytwo manager uses.
// Cached objects lose the managed fields of other managers, and children
// daytwo applies keep only the fingerprint of daytwo's part (transform):
// it is how a reconcile tells that a child already holds what it would
// apply, and skips the write. The transform hands Deployments and
// Services to the cache as slim structs that only NewInformer's informers
// can serve (slim.go): the two settings go together, and a read with
// UnsafeDisableDeepCopy fails for those kinds rather than share the cache's copy.
// Pods and volumes are cached only when they belong to a Database: the
// operator never needs any other, and a cluster has many.
func CacheOptions(namespaces ...string) cache.Options {
	ours, err := labels.Parse(database.LabelDatabase)
	utilruntime.Must(err)
	managed := labels.SelectorFromSet(labels.Set{controller.ManagedByLabel: controller.ManagedBy})
	var only map[string]cache.Config
	for _, ns := range namespaces {
		if only == nil {
			only = map[string]cache.Config{}
		}
		only[ns] = cache.Config{}
	}
	return cache.Options{
		// Namespaced objects are watched in these namespaces only; nil means all.
		DefaultNamespaces: only,
		DefaultTransform:  transform,
		NewInformer:       newInformer,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Label: ours},
			&corev1.PersistentVolumeClaim{}: {Label: ours},
			// Only daytwo's children (controller.CachedOnlyWhenOurs).
			&appsv1.Deployment{}: {Label: managed},
			&corev1.Service{}:    {Label: managed},
			// Nodes only for a drain's cordon: no status (its image list is large).
			&corev1.Node{}: {Transform: func(in any) (any, error) {
				if n, ok := in.(*corev1.Node); ok {
					n.Status = corev1.NodeStatus{}
				}
				return keepOwnManagedFields(in)
			}},
		},
	}
}

// Options are the settings controllers take from the command line.
type Options struct {
	// InstanceImage is the daytwo image copied into PostgreSQL pods.
	InstanceImage string
	// PoolerImage is the PgBouncer image of Databases' pools.
	PoolerImage string
	// Clock drives schedules and deadlines; nil means the real clock.
	Clock clock.PassiveClock
	// WatchNamespaces are the namespaces of a namespaced install (the
	// cache's); nil means all.
	WatchNamespaces []string
}

// DefaultInstanceImage is the daytwo image of this build: the released
// image for a tagged release, the locally built one otherwise.
func DefaultInstanceImage() string {
	if strings.HasPrefix(version.Version, "v") && !strings.HasSuffix(version.Version, "-dirty") {
		return "ghcr.io/daytwo-dev/daytwo:" + version.Version
	}
	return "localhost/daytwo:dev"
}

// DefaultPoolerImage is the PgBouncer image pools run unless a Database
// or --pooler-image names another: Debian trixie's PgBouncer, built
// like the PostgreSQL images (hack/images.sh).
const DefaultPoolerImage = "localhost/pgbouncer:1.24"

// SetupControllers wires one controller per kind into mgr.
func SetupControllers(ctx context.Context, mgr manager.Manager, opts Options) error {
	if opts.InstanceImage == "" {
		opts.InstanceImage = DefaultInstanceImage()
	}
	if opts.PoolerImage == "" {
		opts.PoolerImage = DefaultPoolerImage
	}
	c := mgr.GetClient()
	audiences := apiAudiences(mgr.GetConfig())
	wa := &webapp.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("daytwo"),
		Namespaces: opts.WatchNamespaces, Clock: opts.Clock}
	if err := wa.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("failed to set up the WebApp controller: %w", err)
	}
	if err := (&database.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("daytwo"),
		InstanceImage: opts.InstanceImage, PoolerImage: opts.PoolerImage, APIAudiences: audiences, Clock: opts.Clock}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the Database controller: %w", err)
	}
	if err := (&databasebackup.Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("daytwo"),
		InstanceImage: opts.InstanceImage, APIAudiences: audiences, Clock: opts.Clock}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up the DatabaseBackup controller: %w", err)
	}
	return nil
}
