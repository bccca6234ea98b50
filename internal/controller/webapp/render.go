package webapp

import (
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// Children are the Deployment and Service a reconcile applies for a new
// WebApp that references no ConfigMap, Secret or Database. bench-webapp's
// floors create exactly these, so the operator is measured against clients
// that write the same objects it does, not smaller ones.
func Children(app *v1alpha1.WebApp) (*appsv1ac.DeploymentApplyConfiguration, *corev1ac.ServiceApplyConfiguration) {
	sel := selectorLabels(app)
	in := podInputs{selector: sel, configHash: hashOf([]string(nil))}
	return deployment(app, sel, podTemplate(app, in), failure{}, false), service(app, sel)
}
