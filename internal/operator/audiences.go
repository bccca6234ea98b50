package operator

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"

	"k8s.io/client-go/rest"
)

// apiAudiences are the audiences of the operator's own ServiceAccount
// token: those the API server accepts. nil when the operator runs with
// another kind of credential (a kubeconfig's certificate, as in tests).
func apiAudiences(cfg *rest.Config) []string {
	token := cfg.BearerToken
	if cfg.BearerTokenFile != "" {
		if b, err := os.ReadFile(cfg.BearerTokenFile); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return nil
	}
	var list []string
	if json.Unmarshal(claims.Aud, &list) == nil {
		return list
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil && one != "" {
		return []string{one}
	}
	return nil
}
