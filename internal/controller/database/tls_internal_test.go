package database

import (
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

func TestCertificateCurrent(t *testing.T) {
	db := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"}}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	current := map[string]string{annNotAfter: now.Add(60 * 24 * time.Hour).Format(time.RFC3339), annNames: namesFingerprint(db), annCA: "ca"}
	with := func(k, v string) map[string]string {
		m := maps.Clone(current)
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"issued for these names, 60 days left", current, true},
		{"29 days left: renewed", with(annNotAfter, now.Add(29*24*time.Hour).Format(time.RFC3339)), false},
		{"expired", with(annNotAfter, now.Add(-time.Hour).Format(time.RFC3339)), false},
		{"issued for other names (a renamed Service)", with(annNames, "other"), false},
		{"no CA recorded", with(annCA, ""), false},
		{"no expiry recorded", with(annNotAfter, ""), false},
	} {
		if _, got := certificateCurrent(namesFingerprint(db), tc.ann, now); got != tc.want {
			t.Errorf("%s: current = %v, want %v", tc.name, got, tc.want)
		}
	}
	names := serverNames(db)
	for _, want := range []string{"orders-rw.shop.svc", "orders-ro.shop.svc.cluster.local", "*.orders.shop.svc", "orders-rw"} {
		if !slices.Contains(names, want) {
			t.Errorf("server names lack %s: %v", want, names)
		}
	}
}
