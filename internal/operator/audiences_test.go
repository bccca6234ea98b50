package operator

import (
	"encoding/base64"
	"slices"
	"testing"

	"k8s.io/client-go/rest"
)

func TestAPIAudiencesFromTheOperatorsToken(t *testing.T) {
	b64 := base64.RawURLEncoding.EncodeToString
	token := func(claims string) string { return b64([]byte(`{"alg":"RS256"}`)) + "." + b64([]byte(claims)) + ".sig" }
	for _, tc := range []struct {
		token string
		want  []string
	}{
		{token(`{"aud":["https://kubernetes.default.svc.cluster.local","k3s"]}`), []string{"https://kubernetes.default.svc.cluster.local", "k3s"}},
		{token(`{"aud":"api"}`), []string{"api"}},
		{"not-a-jwt", nil},
		{"", nil},
	} {
		if got := apiAudiences(&rest.Config{BearerToken: tc.token}); !slices.Equal(got, tc.want) {
			t.Errorf("apiAudiences(%q) = %v, want %v", tc.token, got, tc.want)
		}
	}
}
