package database

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// What the instance manager is asked for each declared role: PostgreSQL's
// defaults where the spec is silent, and an Absent role as absent (a
// regression: it was once sent as a role without login, and kept).
func TestAPIRole(t *testing.T) {
	until := metav1.NewTime(time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)))
	for _, tc := range []struct {
		role v1alpha1.DatabaseRole
		want instanceapi.DeclaredRole
	}{
		{v1alpha1.DatabaseRole{Name: "a", Login: true}, instanceapi.DeclaredRole{Name: "a", Login: true, Inherit: true, ConnectionLimit: -1, Password: "pw"}},
		{v1alpha1.DatabaseRole{Name: "b", Inherit: ptr.To(false), ConnectionLimit: ptr.To[int32](3), ValidUntil: &until, InRoles: []string{"g"}},
			instanceapi.DeclaredRole{Name: "b", ConnectionLimit: 3, ValidUntil: ptr.To(until.UTC()), InRoles: []string{"g"}, Password: "pw"}},
		{v1alpha1.DatabaseRole{Name: "c", Login: true, Ensure: v1alpha1.RoleEnsureAbsent}, instanceapi.DeclaredRole{Name: "c", Absent: true}},
	} {
		got := apiRole(tc.role, "pw")
		if got.Name != tc.want.Name || got.Absent != tc.want.Absent || got.Login != tc.want.Login || got.Inherit != tc.want.Inherit ||
			got.ConnectionLimit != tc.want.ConnectionLimit || (got.ValidUntil == nil) != (tc.want.ValidUntil == nil) ||
			(got.ValidUntil != nil && !got.ValidUntil.Equal(*tc.want.ValidUntil)) || len(got.InRoles) != len(tc.want.InRoles) || got.Password != tc.want.Password {
			t.Errorf("apiRole(%+v) = %+v, want %+v", tc.role, got, tc.want)
		}
	}
}
