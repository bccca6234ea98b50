package backup_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// issuer is an OpenID provider as a Kubernetes API server is one for its
// ServiceAccount tokens: a discovery document, a key set, RS256 tokens.
type issuer struct {
	*httptest.Server
	key *rsa.PrivateKey
}

func newIssuer(t *testing.T) *issuer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{key: key}
	b64 := base64.RawURLEncoding.EncodeToString
	mux := http.NewServeMux()
	var first sync.Once
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		// The first answer is slow, as an API server's may be while
		// MinIO starts: MinIO then serves buckets before it knows the
		// role, and the test must wait for it (it failed CI so once).
		first.Do(func() { time.Sleep(time.Second) })
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.URL, "jwks_uri": is.URL + "/openid/v1/jwks",
			"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("/openid/v1/jwks", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "RSA", "alg": "RS256", "use": "sig",
			"kid": "k1", "n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	})
	is.Server = httptest.NewServer(mux)
	t.Cleanup(is.Close)
	return is
}

// token is a ServiceAccount-shaped token for audience, signed with key.
func (is *issuer) token(t *testing.T, audience string, key *rsa.PrivateKey) string {
	b64 := base64.RawURLEncoding.EncodeToString
	now := time.Now()
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "k1", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"iss": is.URL, "sub": "system:serviceaccount:shop:orders-instance",
		"aud": []string{audience}, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	signed := b64(header) + "." + b64(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + b64(sig)
}

// Storage reached with no static key: a web identity token exchanged at
// MinIO's STS (as a pod's projected ServiceAccount token is), and keys in
// the environment through the chain; objects written with SSE-S3 and
// SSE-KMS come back encrypted by the store. A token of another audience,
// or signed by another key, is refused.
// Not parallel: it sets the process's environment.
func TestS3WithoutStaticKeys(t *testing.T) {
	is := newIssuer(t)
	const clientID = "minio-sts"
	kmsKey := make([]byte, 32)
	_, _ = rand.Read(kmsKey)
	m := testpg.StartMinIOWith(t,
		"MINIO_IDENTITY_OPENID_CONFIG_URL="+is.URL+"/.well-known/openid-configuration",
		"MINIO_IDENTITY_OPENID_CLIENT_ID="+clientID, "MINIO_IDENTITY_OPENID_ROLE_POLICY=readwrite",
		"MINIO_KMS_SECRET_KEY=daytwo-key:"+base64.StdEncoding.EncodeToString(kmsKey))
	root := s3(t, m, "webid")
	if err := root.Put(ctx, "hello", strings.NewReader("from root")); err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte(clientID)) // as MinIO computes it
	roleARN := "arn:minio:iam:::role/" + base64.RawURLEncoding.EncodeToString(sum[:])
	dir := t.TempDir()
	withToken := func(name, token string, sse instanceapi.S3Access) backup.Storage {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		sse.RoleARN, sse.WebIdentityTokenFile = roleARN, file
		st, err := backup.NewS3(backup.S3Config{Endpoint: m.Endpoint, Bucket: "webid", Insecure: true, S3Access: sse})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	st := withToken("good", is.token(t, clientID, is.key), instanceapi.S3Access{SSE: "AES256"})
	// MinIO loads its OpenID provider in the background once it serves
	// buckets; until then it knows no role. Wait for that, and only that.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := st.Put(ctx, "by-identity", strings.NewReader("web identity"))
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "is not defined") || time.Now().After(deadline) {
			t.Fatalf("put with a web identity: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rc, err := st.Get(ctx, "hello")
	if err != nil {
		t.Fatalf("get with a web identity: %v", err)
	}
	if b, _ := io.ReadAll(rc); string(b) != "from root" {
		t.Fatalf("read %q", b)
	}
	_ = rc.Close()
	kms := withToken("kms", is.token(t, clientID, is.key), instanceapi.S3Access{SSE: "aws:kms", SSEKMSKeyID: "daytwo-key"})
	if err := kms.Put(ctx, "by-kms", strings.NewReader("kms")); err != nil {
		t.Fatalf("put with SSE-KMS: %v", err)
	}
	rootClient, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"by-identity": "AES256", "by-kms": "aws:kms", "hello": ""} {
		info, err := rootClient.StatObject(ctx, "webid", key, minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Metadata.Get("X-Amz-Server-Side-Encryption"); got != want {
			t.Errorf("%s is stored with server-side encryption %q, want %q", key, got, want)
		}
	}

	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	for name, token := range map[string]string{"audience": is.token(t, "sts.amazonaws.com", is.key), "forged": is.token(t, clientID, other)} {
		if err := withToken(name, token, instanceapi.S3Access{}).Put(ctx, "x", strings.NewReader("x")); err == nil {
			t.Errorf("a token with the wrong %s was accepted", name)
		}
	}

	// No keys given, no role: the environment's chain finds these.
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	env, err := backup.NewS3(backup.S3Config{Endpoint: m.Endpoint, Bucket: "webid", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Size(ctx, "hello"); err != nil {
		t.Fatalf("the environment's keys: %v", err)
	}
}
