package webapp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// hashOf is a short, stable digest of v's JSON form.
func hashOf(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called on API types, which always marshal
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}
