package postgres

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// SCRAMVerifier computes the SCRAM-SHA-256 verifier PostgreSQL stores for a
// password (RFC 5802/7677, as in pg_authid.rolpassword). Sending the verifier
// in CREATE/ALTER ROLE ... PASSWORD keeps the plain password out of the
// server: out of its logs, pg_stat_activity and any statement error.
func SCRAMVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("failed to read a salt: %w", err)
	}
	return scramVerifier(password, salt)
}

func scramVerifier(password string, salt []byte) (string, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("failed to derive the salted password: %w", err)
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

// SCRAMMatches says whether verifier, as pg_authid.rolpassword stores
// it, is password's: the drift check of a declared role's password, which
// a verifier made anew (a new salt) could not be compared with.
func SCRAMMatches(verifier, password string) bool {
	// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
	rest, ok := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	if !ok {
		return false
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return false
	}
	iter, saltB64, ok := strings.Cut(params, ":")
	if !ok {
		return false
	}
	n, err := strconv.Atoi(iter)
	salt, err2 := base64.StdEncoding.DecodeString(saltB64)
	if err != nil || err2 != nil || n < 1 || n > 1<<20 {
		return false
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, n, sha256.Size)
	if err != nil {
		return false
	}
	storedKey := sha256.Sum256(hmacSHA256(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return subtle.ConstantTimeCompare([]byte(keys), []byte(b64(storedKey[:])+":"+b64(hmacSHA256(salted, "Server Key")))) == 1
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// Password returns a random password of 32 URL-safe characters (192 bits).
func Password() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to generate a password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
