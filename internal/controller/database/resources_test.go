package database

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func newDB(mutate ...func(*v1alpha1.Database)) *v1alpha1.Database {
	db := &v1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "uid-1", Generation: 3},
		Spec: v1alpha1.DatabaseSpec{Version: "15", Size: v1alpha1.SizeSmall,
			Bootstrap: &v1alpha1.DatabaseBootstrap{InitDB: &v1alpha1.BootstrapInitDB{Database: "orders", Owner: "shop"}}},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func TestServicesSelectRoles(t *testing.T) {
	db := newDB()
	if s := service(db, "orders", ""); *s.Spec.ClusterIP != corev1.ClusterIPNone || s.Spec.Selector[labelRole] != "" {
		t.Errorf("headless Service wrong: %+v", s.Spec)
	}
	if s := service(db, "orders-rw", "primary"); s.Spec.Selector[labelRole] != "primary" || s.Spec.Selector[labelDatabase] != "orders" {
		t.Errorf("-rw selector = %v", s.Spec.Selector)
	}
	if s := service(db, "orders-ro", "replica"); s.Spec.Selector[labelRole] != "replica" {
		t.Errorf("-ro selector = %v", s.Spec.Selector)
	}
}

func TestCredentialsData(t *testing.T) {
	if got := connectionURI("app", "p@ss:/?", "h.svc", "5432", "app"); got != "postgresql://app:p%40ss%3A%2F%3F@h.svc:5432/app?sslmode=verify-full" {
		t.Errorf("a password with URI delimiters: %s", got)
	}
	d := credentialsData(newDB(), "pw")
	if string(d["uri"]) != "postgresql://shop:pw@orders-rw.shop.svc:5432/orders?sslmode=verify-full" || string(d["username"]) != "shop" || string(d["dbname"]) != "orders" {
		t.Errorf("credentials = %q", d)
	}
}

// pickNow is the time TestPickRestartOrder picks at.
var pickNow = time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
