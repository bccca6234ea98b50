package database_test

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// serverNames are names every Database's server certificate must carry.
func serverNames(ns, db string) []string {
	return []string{db + "-rw." + ns + ".svc", db + "-ro." + ns + ".svc", db + "-0." + db + "." + ns + ".svc", db + "-rw"}
}

// spec.tls.serverCertificate: a Secret that lacks a name clients connect
// with holds the Database back with a condition naming the field; once
// the Secret is right, the instances serve it and clients get its CA.
func TestDatabaseServesTheUsersCertificate(t *testing.T) {
	ns := env.Namespace(t)
	caCert, caKey, err := pki.NewCA("user CA", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(names []string) map[string][]byte {
		cert, key, err := pki.Issue(caCert, caKey, names[0], names, pki.Server, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": caCert}
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-tls"}, Type: corev1.SecretTypeTLS,
		Data: issue([]string{"orders-rw." + ns + ".svc"})}
	create(t, s)
	create(t, newDB(ns, "orders", func(d *v1alpha1.Database) {
		d.Spec.TLS = &v1alpha1.DatabaseTLS{ServerCertificate: &v1alpha1.LocalObjectReference{Name: "shop-tls"}}
	}))
	db := waitCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonCertificateInvalid)
	msg := condition(db, v1alpha1.ConditionReady).Message
	if want := "spec.tls.serverCertificate: Secret shop-tls: the certificate does not name orders-ro." + ns + ".svc"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if _, err := get(ns, "orders", &appsv1.StatefulSet{}); err == nil {
		t.Fatal("a StatefulSet was created for a certificate clients would refuse")
	}

	update(t, s, func(s *corev1.Secret) {
		s.Data = issue([]string{"orders-rw." + ns + ".svc", "orders-ro." + ns + ".svc", "*.orders." + ns + ".svc"})
	})
	waitCondition(t, ns, "orders", v1alpha1.ConditionServerCertificate, metav1.ConditionTrue, v1alpha1.ReasonCertificateValid)
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", func() (bool, error) { _, err := get(ns, "orders", sts); return err == nil, client.IgnoreNotFound(err) })
	creds, _ := get(ns, "orders-credentials", &corev1.Secret{})
	if string(creds.Data["ca.crt"]) != string(caCert) {
		t.Errorf("the credentials Secret does not carry the user's CA")
	}
	if _, err := get(ns, "orders-server-tls", &corev1.Secret{}); err == nil {
		t.Errorf("a server certificate was issued although the user brings one")
	}
	// daytwo's CA exists all the same: the instance API verifies the
	// operator's client certificate with it.
	if ca, err := get(ns, "orders-ca", &corev1.Secret{}); err != nil || len(ca.Data["ca.key"]) == 0 {
		t.Errorf("no CA for the instance API's client certificates: %v", err)
	}
}
