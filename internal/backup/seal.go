package backup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
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
// one), used as they are once surrounding white space is trimmed (as the
// instance manager trims the same key read from a file).
const SeriesKeyEnv = "DAYTWO_SERIES_KEY"

// MinKeyBytes is the shortest series key taken.
const MinKeyBytes = 32

// ErrNoSeriesKey means a series key was required and none was given.
var ErrNoSeriesKey = errors.New("no series key: " + SeriesKeyEnv + " is not set (its Secret is missing?)")

func (s Series) missing() error {
	if s.KeyMissing {
		return ErrNoSeriesKey
	}
	return nil
}

// MAC is the HMAC-SHA256 under key of parts, each length-prefixed, after
// domain, which says what is authenticated (so a MAC of one kind of object
// never passes for another's).
func MAC(key []byte, domain string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	var n [8]byte
	for _, p := range append([][]byte{[]byte(domain)}, parts...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// SignJSON is the hex MAC of v's JSON (v's own MAC field left empty by
// the caller) under key, for domain.
func SignJSON(key []byte, domain string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(MAC(key, domain, b)), nil
}

// VerifyJSON says whether mac is v's SignJSON under key.
func VerifyJSON(key []byte, domain string, v any, mac string) (bool, error) {
	want, err := SignJSON(key, domain, v)
	if err != nil {
		return false, err
	}
	return hmac.Equal([]byte(want), []byte(mac)), nil
}

// manifestDomain is what a manifest's MAC authenticates.
const manifestDomain = "daytwo manifest v1"

// seal sets m's MAC under s's key (none without a key).
func (s Series) seal(m Manifest) (Manifest, error) {
	m.MAC = ""
	if len(s.Key) == 0 {
		return m, nil
	}
	mac, err := SignJSON(s.Key, manifestDomain, m)
	m.MAC = mac
	return m, err
}

// trusted says whether m, read from key, may be used by s: always without
// a series key; with one, only when its MAC verifies. A MAC that does not
// verify is an error: someone changed the manifest, or wrote it with
// another key.
func (s Series) trusted(m Manifest, key string) (bool, error) {
	if len(s.Key) == 0 {
		return !s.KeyMissing, s.missing()
	}
	if m.MAC == "" {
		return false, nil
	}
	mac := m.MAC
	m.MAC = ""
	if ok, err := VerifyJSON(s.Key, manifestDomain, m, mac); err != nil || !ok {
		return false, errors.Join(fmt.Errorf("manifest %s %w: changed in the bucket, or written with another key", key, ErrUnauthenticated), err)
	}
	return true, nil
}
