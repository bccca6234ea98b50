package backup

import (
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/minio/sio"
)

// Client-side encryption: with an encryption key (a Secret the
// DatabaseBackup names, never in the bucket), every object daytwo stores
// besides the manifests (dumps, roles, base backups, WAL files) is
// encrypted before it leaves the pod, as minio/sio's DARE 2.0 stream
// (AES-256-GCM or ChaCha20-Poly1305 in 64 KiB packages, each
// authenticated, the stream's end too). Each object has a key of its
// own, derived from the encryption key and a random salt stored in front
// of it: no two objects share a key, whatever their names. What is
// compressed is compressed before, so compression still pays.

// Keys are what a series' objects are sealed (MAC) and encrypted with;
// either may be empty (then nothing is sealed, or encrypted).
type Keys struct {
	Seal, Encrypt []byte
}

// Keys are s's keys.
func (s Series) Keys() Keys { return Keys{Seal: s.Key, Encrypt: s.EncryptionKey} }

// CheckKeys refuses a key too short (a series key may be empty, which
// turns authentication off), and an encryption key without a seal key:
// encryption alone hides data but does not keep it whole (a file replaced
// by a plain one would be read as plain).
func CheckKeys(k Keys) error {
	if n := len(k.Seal); n > 0 && n < MinKeyBytes {
		return fmt.Errorf("the series key (%s, from the DatabaseBackup's series key Secret) has %d bytes; at least %d are needed, or none to turn authentication off",
			SeriesKeyEnv, n, MinKeyBytes)
	}
	switch n := len(k.Encrypt); {
	case n == 0:
		return nil
	case n < MinKeyBytes:
		return fmt.Errorf("the encryption key (%s, from spec.encryption.keySecretRef) has %d bytes; at least %d are needed",
			EncryptionKeyEnv, n, MinKeyBytes)
	case len(k.Seal) == 0:
		return fmt.Errorf("an encryption key needs a series key (%s) beside it, to authenticate what it encrypts", SeriesKeyEnv)
	}
	return nil
}

// EncryptionKeyEnv is the variable a backup Job, or a restore, reads the
// encryption key from: at least MinKeyBytes bytes, white space trimmed.
const EncryptionKeyEnv = "DAYTWO_ENCRYPTION_KEY"

// encMagic starts every encrypted object; the salt follows it.
var encMagic = []byte("daytwo-enc-v1\n")

const saltBytes = 32

// ErrEncrypted means an object is encrypted and no key was given.
var ErrEncrypted = errors.New("the object is encrypted, and no encryption key was given")

func sioConfig(master, salt []byte) (sio.Config, error) {
	key, err := hkdf.Key(sha256.New, master, salt, "daytwo object v1", 32)
	return sio.Config{MinVersion: sio.Version20, MaxVersion: sio.Version20, Key: key}, err
}

// EncryptWriter encrypts what is written to it into dst under key, until
// closed (which ends the stream); without a key it is dst.
func EncryptWriter(key []byte, dst io.Writer) (io.WriteCloser, error) {
	if len(key) == 0 {
		return nopWriteCloser{dst}, nil
	}
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	cfg, err := sioConfig(key, salt)
	if err != nil {
		return nil, err
	}
	if _, err := dst.Write(append(append([]byte{}, encMagic...), salt...)); err != nil {
		return nil, err
	}
	return sio.EncryptWriter(dst, cfg)
}

// DecryptReader reads src, an object EncryptWriter wrote under key. A
// stream changed, cut short or encrypted with another key fails as it is
// read. encrypted says whether src must be encrypted (a manifest says so):
// an object that is not, when it must be, is refused, and one that is,
// when it must not be, read as stored.
func DecryptReader(key []byte, src io.Reader, encrypted bool) (io.Reader, error) {
	if !encrypted {
		return src, nil
	}
	if len(key) == 0 {
		return nil, ErrEncrypted
	}
	head := make([]byte, len(encMagic)+saltBytes)
	if _, err := io.ReadFull(src, head); err != nil || !bytes.Equal(head[:len(encMagic)], encMagic) {
		return nil, errors.Join(errors.New("the object is not encrypted as daytwo encrypts"), err)
	}
	cfg, err := sioConfig(key, head[len(encMagic):])
	if err != nil {
		return nil, err
	}
	return sio.DecryptReader(src, cfg)
}

// IsEncrypted says whether stored starts as an encrypted object does.
func IsEncrypted(stored []byte) bool { return bytes.HasPrefix(stored, encMagic) }

// Encrypt and Decrypt are EncryptWriter and DecryptReader on whole
// objects in memory (WAL files).
func Encrypt(key, plain []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := EncryptWriter(key, &out)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(plain); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Decrypt returns the plain content of stored (stored itself when it is
// not encrypted).
func Decrypt(key, stored []byte) ([]byte, error) {
	if !IsEncrypted(stored) {
		return stored, nil
	}
	r, err := DecryptReader(key, bytes.NewReader(stored), true)
	if err != nil {
		return nil, err
	}
	plain, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("failed to decrypt: %w", err)
	}
	return plain, nil
}
