package backup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// A bucket is not a trust boundary: whoever can write it could change a
// backup, and its checksums with it. With a series key (Series.Key, kept
// in a Secret, never in the bucket) daytwo authenticates what it stores:
// each manifest carries an HMAC-SHA256 of its content under the key, and a
// manifest names its parts by SHA-256, so the parts are authenticated
// through it. A manifest of the series whose MAC does not verify is an
// error; one without a MAC (written before keys, or stripped) is not
// trusted, so not listed. Restores verify a part before any of it runs.

// ErrUnauthenticated means stored data fails the series key's check.
var ErrUnauthenticated = errors.New("fails authentication with the series key")

// SeriesKeyEnv is the variable a backup Job, or a restore, reads the
// series key from: at least MinKeyBytes bytes (openssl rand -hex 32 makes
// one), used as they are.
const SeriesKeyEnv = "DAYTWO_SERIES_KEY"

// MinKeyBytes is the shortest series key taken.
const MinKeyBytes = 32

// CheckKey refuses a series key too short to authenticate anything.
func CheckKey(key []byte) error {
	if len(key) > 0 && len(key) < MinKeyBytes {
		return fmt.Errorf("the series key (%s, from the DatabaseBackup's spec.seriesKeySecretRef) has %d bytes; at least %d are needed, or none to turn authentication off",
			SeriesKeyEnv, len(key), MinKeyBytes)
	}
	return nil
}

// macOf is the MAC of m's content (its MAC field empty) under key: a
// domain-separated HMAC-SHA256.
func macOf(key []byte, m Manifest) ([]byte, error) {
	m.MAC = ""
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte("daytwo manifest v1\n"))
	h.Write(b)
	return h.Sum(nil), nil
}

// seal sets m's MAC under s's key (none without a key).
func (s Series) seal(m Manifest) (Manifest, error) {
	m.MAC = ""
	if len(s.Key) == 0 {
		return m, nil
	}
	mac, err := macOf(s.Key, m)
	m.MAC = hex.EncodeToString(mac)
	return m, err
}

// trusted says whether m, read from key, may be used by s: always without
// a series key; with one, only when its MAC verifies. A MAC that does not
// verify is an error: someone changed the manifest, or wrote it with
// another key.
func (s Series) trusted(m Manifest, key string) (bool, error) {
	if len(s.Key) == 0 {
		return true, nil
	}
	if m.MAC == "" {
		return false, nil
	}
	want, err := macOf(s.Key, m)
	if err != nil {
		return false, err
	}
	if got, err := hex.DecodeString(m.MAC); err != nil || !hmac.Equal(got, want) {
		return false, fmt.Errorf("manifest %s %w: changed in the bucket, or written with another key", key, ErrUnauthenticated)
	}
	return true, nil
}
