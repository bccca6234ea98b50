package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Event records an Event about regarding (and related, when not nil) and
// logs the same decision or action with the reconcile's contextual logger,
// so the operator's log tells what its Events tell, with the reconcile's
// keys. A Warning is logged at level 0 and a Normal one too: they are the
// operator's decisions. note must carry no secret (the e2e scans both).
func Event(ctx context.Context, rec events.EventRecorder, regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	rec.Eventf(regarding, related, eventType, reason, action, note, args...)
	kv := []any{"reason", reason, "action", action}
	if o, ok := regarding.(client.Object); ok {
		kv = append(kv, "regarding", klog.KObj(o))
	}
	if o, ok := related.(client.Object); ok {
		kv = append(kv, "related", klog.KObj(o))
	}
	if eventType == corev1.EventTypeWarning {
		kv = append(kv, "warning", true)
	}
	logf.FromContext(ctx).Info(fmt.Sprintf(note, args...), kv...)
}
