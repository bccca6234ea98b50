package database_test

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// spec.pooler in the API server: per pool a Deployment of PgBouncer pods
// (not selected by the Database's own selectors), a Service, a budget; a
// certificate for both Services from the Database's CA; the credentials
// Secret names the pool; a WebApp's databaseRef can go through it, and
// waits for it when the Database has none; the read-only pool, then the
// whole pooler, go when the spec drops them. PgBouncer itself runs in
// internal/pooler's test, the pools under switchovers on the real node.
func TestPoolerObjects(t *testing.T) {
	ns := env.Namespace(t)
	create(t, newDB(ns, "orders", func(db *v1alpha1.Database) {
		db.Spec.Pooler = &v1alpha1.PoolerSpec{Instances: ptr.To[int32](3), ReadOnly: true, DefaultPoolSize: ptr.To[int32](15)}
	}))
	var rw *appsv1.Deployment
	eventually(t, "both pools' Deployments, Services and budgets", func() (bool, error) {
		var err error
		if rw, err = get(ns, "orders-pooler-rw", &appsv1.Deployment{}); err != nil {
			return false, ignoreNotFound(err)
		}
		for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
			if _, err := get(ns, "orders-pooler-ro", obj); err != nil {
				return false, ignoreNotFound(err)
			}
		}
		return true, nil
	})
	pod := rw.Spec.Template
	c := pod.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if *rw.Spec.Replicas != 3 || pod.Labels["daytwo.dev/database"] != "" || pod.Labels["daytwo.dev/pooler"] != "orders-pooler-rw" ||
		c.Image != "localhost/pgbouncer:1.24" || !strings.Contains(args, "--target=orders-rw."+ns+".svc") ||
		!strings.Contains(args, "--default-pool-size=15") || !strings.Contains(args, "--pool-mode=transaction") ||
		len(pod.Spec.InitContainers) != 1 || ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) ||
		c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Fatalf("the read-write pool's Deployment has the wrong shape: replicas %d, labels %v, image %s, args %s",
			*rw.Spec.Replicas, pod.Labels, c.Image, args)
	}
	var projected []string
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				for _, it := range s.Secret.Items {
					projected = append(projected, s.Secret.Name+":"+it.Key+">"+it.Path)
				}
			}
		}
	}
	slices.Sort(projected)
	if want := []string{"orders-ca:ca.crt>client-ca.crt", "orders-pooler-tls:tls.crt>tls.crt", "orders-pooler-tls:tls.key>tls.key",
		"orders-pooler:password>auth-password", "orders-server-tls:ca.crt>server-ca.crt"}; !slices.Equal(projected, want) {
		t.Errorf("the pool's pods get %v, want %v", projected, want)
	}
	svc, err := get(ns, "orders-pooler-ro", &corev1.Service{})
	if err != nil || svc.Spec.Selector["daytwo.dev/pooler"] != "orders-pooler-ro" || svc.Spec.Ports[0].Port != 5432 {
		t.Fatalf("the read-only pool's Service: %v %+v", err, svc.Spec)
	}
	pdb, err := get(ns, "orders-pooler-rw", &policyv1.PodDisruptionBudget{})
	if err != nil || pdb.Spec.MaxUnavailable.IntVal != 1 {
		t.Fatalf("the read-write pool's budget: %v", err)
	}
	tlsSecret, err := get(ns, "orders-pooler-tls", &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(tlsSecret.Data["tls.crt"])
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !slices.Contains(cert.DNSNames, "orders-pooler-rw."+ns+".svc") || !slices.Contains(cert.DNSNames, "orders-pooler-ro") {
		t.Fatalf("the pools' certificate names %v (%v)", cert.DNSNames, err)
	}
	eventually(t, "the credentials Secret naming the pool", func() (bool, error) {
		s, err := get(ns, "orders-credentials", &corev1.Secret{})
		return err == nil && string(s.Data["pooler-host"]) == "orders-pooler-rw."+ns+".svc" &&
			strings.Contains(string(s.Data["pooler-uri"]), "@orders-pooler-rw."+ns+".svc:5432/app?sslmode=verify-full"), ignoreNotFound(err)
	})
	db := waitCondition(t, ns, "orders", v1alpha1.ConditionPoolerReady, metav1.ConditionFalse, v1alpha1.ReasonPoolerProgressing)
	if msg := condition(db, v1alpha1.ConditionPoolerReady).Message; !strings.Contains(msg, "orders-pooler-rw has 0 of 3 pods ready") ||
		db.Status.Pooler == nil || db.Status.Pooler.Host != "orders-pooler-rw."+ns+".svc" {
		t.Fatalf("PoolerReady says %q, status.pooler %+v", msg, db.Status.Pooler)
	}

	// A WebApp through the pool gets the pool's URI; one that asks a
	// Database without a pool waits for it.
	create(t, newDB(ns, "plain"))
	for _, app := range []*v1alpha1.WebApp{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"}, Spec: v1alpha1.WebAppSpec{Image: "shop:1", Port: 8080,
			DatabaseRef: &v1alpha1.WebAppDatabaseRef{Name: "orders", Pooler: true}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost"}, Spec: v1alpha1.WebAppSpec{Image: "shop:1", Port: 8080,
			DatabaseRef: &v1alpha1.WebAppDatabaseRef{Name: "plain", Pooler: true}}},
	} {
		create(t, app)
	}
	eventually(t, "the WebApp's DATABASE_URL through the pool", func() (bool, error) {
		d, err := get(ns, "shop", &appsv1.Deployment{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "DATABASE_URL" {
				return e.ValueFrom.SecretKeyRef.Key == v1alpha1.CredentialsPoolerURI, nil
			}
		}
		return false, nil
	})
	eventually(t, "the WebApp without a pool waiting for it", func() (bool, error) {
		app, err := get(ns, "lost", &v1alpha1.WebApp{})
		if err != nil {
			return false, err
		}
		for _, c := range app.Status.Conditions {
			if strings.Contains(c.Message, "spec.pooler in Database plain") {
				return true, nil
			}
		}
		return false, nil
	})

	// Without readOnly the read-only pool goes; without spec.pooler, the
	// pools, and the credentials Secret no longer names one.
	update(t, db, func(db *v1alpha1.Database) { db.Spec.Pooler.ReadOnly = false })
	eventually(t, "the read-only pool removed", func() (bool, error) {
		_, err := get(ns, "orders-pooler-ro", &appsv1.Deployment{})
		_, serr := get(ns, "orders-pooler-ro", &corev1.Service{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(serr), nil
	})
	// The auth role's Secret stays until a primary made the role unable to
	// log in (none runs here).
	update(t, db, func(db *v1alpha1.Database) { db.Spec.Pooler = nil })
	eventually(t, "the pooler removed", func() (bool, error) {
		_, err := get(ns, "orders-pooler-rw", &appsv1.Deployment{})
		_, serr := get(ns, "orders-pooler", &corev1.Secret{})
		s, cerr := get(ns, "orders-credentials", &corev1.Secret{})
		return apierrors.IsNotFound(err) && serr == nil && cerr == nil && s.Data["pooler-uri"] == nil, nil
	})
	eventually(t, "PoolerReady and status.pooler gone", func() (bool, error) {
		db, err := get(ns, "orders", &v1alpha1.Database{})
		return err == nil && condition(db, v1alpha1.ConditionPoolerReady) == nil && db.Status.Pooler == nil, err
	})
}
