package postgres

import (
	"strings"
	"testing"
)

func TestSCRAMVerifier(t *testing.T) {
	salt := []byte("0123456789abcdef")
	a, err := scramVerifier("secret", salt)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := scramVerifier("secret", salt)
	c, _ := scramVerifier("other", salt)
	if a != b || a == c {
		t.Fatalf("verifier not a function of the password: %s %s %s", a, b, c)
	}
	if !strings.HasPrefix(a, "SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$") {
		t.Errorf("unexpected verifier format %s", a)
	}
	// The login against a real server in internal/instance proves the keys.
	r, _ := SCRAMVerifier("secret")
	if r == a {
		t.Errorf("random salt reused")
	}
	p, _ := Password()
	if len(p) != 32 || strings.ContainsAny(p, "'\"\\ ") {
		t.Errorf("bad password shape %q", p)
	}
}

// SCRAMMatches checks a stored verifier against a password: a role's
// drift check. A real server's verifier is checked in internal/instance
// (TestDeclaredRolesAreMadeKeptAndDropped: an unchanged role is left alone).
func TestSCRAMMatches(t *testing.T) {
	v, err := SCRAMVerifier("secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		verifier, password string
		want               bool
	}{
		{v, "secret", true},
		{v, "Secret", false},
		{v, "", false},
		{"md5" + strings.Repeat("0", 32), "secret", false},
		{"SCRAM-SHA-256$4096:not base64$x:y", "secret", false},
		{"SCRAM-SHA-256$0:MDEy$x:y", "secret", false},
		{strings.Replace(v, "$4096:", "$4097:", 1), "secret", false},
	} {
		if got := SCRAMMatches(tc.verifier, tc.password); got != tc.want {
			t.Errorf("SCRAMMatches(%q, %q) = %v, want %v", tc.verifier, tc.password, got, tc.want)
		}
	}
}
