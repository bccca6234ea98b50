package database_test

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// Without spec.tls, the operator keeps a CA per Database, issues a server
// certificate that verifies for every name clients use, gives clients the
// CA in the credentials Secret, projects the pair into the instances, and
// issues a new one when the Secret goes.
func TestDatabaseServesItsOwnCertificate(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "orders"))
	db := waitCondition(t, ns, "orders", v1alpha1.ConditionServerCertificate, metav1.ConditionTrue, v1alpha1.ReasonCertificateValid)
	t.Logf("condition: %s", condition(db, v1alpha1.ConditionServerCertificate).Message)

	ca, err := get(ns, "orders-ca", &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	served, err := get(ns, "orders-server-tls", &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	notAfter, err := pki.Verify(served.Data["tls.crt"], served.Data["tls.key"], ca.Data["ca.crt"], serverNames(ns, "orders"), pki.Server, time.Now())
	if err != nil {
		t.Fatalf("the server certificate: %v", err)
	}
	if left := time.Until(notAfter); left < 80*24*time.Hour || left > 91*24*time.Hour {
		t.Errorf("the server certificate is valid for %s, want 90 days", left)
	}
	if owner := metav1.GetControllerOf(ca); owner == nil || owner.Name != "orders" {
		t.Errorf("the CA Secret is not the Database's: %v", owner)
	}
	creds, _ := get(ns, "orders-credentials", &corev1.Secret{})
	if string(creds.Data["ca.crt"]) != string(ca.Data["ca.crt"]) {
		t.Errorf("the credentials Secret does not carry the CA")
	}
	if _, ok := creds.Data["ca.key"]; ok {
		t.Fatal("the credentials Secret carries the CA's key")
	}

	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "orders", sts); return err == nil, client.IgnoreNotFound(err) })
	pod := sts.Spec.Template.Spec
	if !slices.Contains(pod.Containers[0].Args, "--tls") {
		t.Errorf("the instance manager is not asked to serve TLS: %v", pod.Containers[0].Args)
	}
	projected := map[string]map[string]string{}
	for _, v := range pod.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				projected[src.Secret.Name] = map[string]string{}
				for _, item := range src.Secret.Items {
					projected[src.Secret.Name][item.Key] = item.Path
				}
			}
		}
	}
	if p := projected["orders-server-tls"]; len(p) != 3 || p["tls.key"] != "tls.key" {
		t.Errorf("the server certificate projected into the instances: %v", p)
	}
	// The instance API: HTTPS probes, and the CA's certificate (never its
	// key) to verify the operator's client certificate with.
	if p := projected["orders-ca"]; len(p) != 1 || p["ca.crt"] != "api-client-ca.crt" {
		t.Errorf("the CA projected into the instances: %v; want its certificate only, as api-client-ca.crt", p)
	}
	for _, probe := range []*corev1.Probe{pod.Containers[0].ReadinessProbe, pod.Containers[0].LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("a probe of the instance API is not HTTPS: %+v", probe)
		}
	}

	// Deleting the Secret asks for a new certificate from the same CA.
	if err := env.Client.Delete(ctx, served); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new server certificate", func() (bool, error) {
		s, err := get(ns, "orders-server-tls", &corev1.Secret{})
		return err == nil && s.UID != served.UID, client.IgnoreNotFound(err)
	})
	again, _ := get(ns, "orders-server-tls", &corev1.Secret{})
	if _, err := pki.Verify(again.Data["tls.crt"], again.Data["tls.key"], ca.Data["ca.crt"], serverNames(ns, "orders"), pki.Server, time.Now()); err != nil {
		t.Errorf("the new certificate: %v", err)
	}
	if creds, _ := get(ns, "orders-credentials", &corev1.Secret{}); string(creds.Data["ca.crt"]) != string(ca.Data["ca.crt"]) {
		t.Errorf("the CA changed with the server certificate")
	}
}
