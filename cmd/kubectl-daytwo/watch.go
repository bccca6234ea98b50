package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// watchObject calls fn with the object named name as it is now and after
// each change, until fn says it is done, fn fails, the object goes or ctx
// ends. A watch the API server closes is opened again.
func watchObject[T client.Object](ctx context.Context, e *env, obj T, list client.ObjectList, fn func(T) (bool, error)) error {
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	if done, err := fn(obj); done || err != nil {
		return err
	}
	rv := obj.GetResourceVersion()
	for first := true; ; first = false {
		if !first {
			// Between two watches the object may change or go: read it
			// again (a watch by name reports no deletion it did not see).
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("%s was deleted", obj.GetName())
				}
				return err
			}
			if obj.GetResourceVersion() != rv {
				rv = obj.GetResourceVersion()
				if done, err := fn(obj); done || err != nil {
					return err
				}
			}
		}
		w, err := e.c.Watch(ctx, list, client.InNamespace(obj.GetNamespace()),
			client.MatchingFields{"metadata.name": obj.GetName()})
		if err != nil {
			return err
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Deleted:
					return true, fmt.Errorf("%s was deleted", obj.GetName())
				case watch.Error:
					return false, apierrors.FromObject(ev.Object)
				case watch.Added, watch.Modified:
					o, ok := ev.Object.(T)
					if !ok || o.GetResourceVersion() == rv {
						continue
					}
					rv = o.GetResourceVersion()
					if done, err := fn(o); done || err != nil {
						return true, err
					}
				}
			}
			return false, nil
		}()
		if done {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			return err
		}
	}
}

func (e *env) watchDatabase(ctx context.Context, name string, fn func(*v1alpha1.Database) (bool, error)) error {
	db := &v1alpha1.Database{}
	db.Namespace, db.Name = e.namespace, name
	return watchObject(ctx, e, db, &v1alpha1.DatabaseList{}, fn)
}

// waitFlags are --wait and --timeout of a verb whose outcome the operator
// reports later.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "Wait until "+what+".")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 10*time.Minute, "How long --wait waits.")
}

// errSilent ends a command with its exit code and no message: what it
// printed said it all.
var errSilent = errors.New("")

// errTimeout is a wait that ran out.
var errTimeout = errors.New("timed out")

// until runs fn under the timeout; a wait that runs out says what it
// waited for and exits with exitTimeout.
func (w *waitFlags) until(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	err := fn(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return exitError{code: exitTimeout, err: fmt.Errorf("%w after %s waiting for %s", errTimeout, w.timeout, what)}
	}
	return err
}

// Exit codes a pipeline can act on.
const (
	exitFailed  = 1 // the operation failed (a canary aborted, a backup failed)
	exitTimeout = 2 // --wait or --timeout ran out first
	exitRunning = 3 // asked without waiting, the operation still runs
)

type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}
