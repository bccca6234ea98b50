package backup

import (
	"strings"
	"testing"
)

func TestImportedRolesKeepNoPowersAndErrorsNoPasswords(t *testing.T) {
	t.Parallel()
	for _, stmt := range splitStatements(`CREATE ROLE boss;
ALTER ROLE boss WITH SUPERUSER INHERIT CREATEROLE CREATEDB LOGIN REPLICATION BYPASSRLS PASSWORD 'SCRAM-SHA-256$4096:a SUPERUSER b';
ALTER ROLE quiet WITH SUPERUSER REPLICATION BYPASSRLS;`) {
		if _, ok := roleStatement(stmt); !ok {
			continue
		}
		got := withoutPowers(stmt)
		head, pw, _ := strings.Cut(got, " PASSWORD ")
		for _, p := range []string{" SUPERUSER", " REPLICATION", " BYPASSRLS"} {
			if strings.Contains(head+" ", p+" ") || strings.Contains(head, p+";") {
				t.Errorf("%q keeps%s", got, p)
			}
		}
		if pw != "" && pw != "'SCRAM-SHA-256$4096:a SUPERUSER b';" && pw != "'SCRAM-SHA-256$4096:a SUPERUSER b'" {
			t.Errorf("the password literal changed: %q", pw)
		}
		if r := redactPasswords(stmt); strings.Contains(r, "SCRAM") {
			t.Errorf("redacted statement still holds the hash: %q", r)
		}
	}
}

func TestScrubDropsRowData(t *testing.T) {
	t.Parallel()
	stderr := `pg_restore: error: COPY failed for table "users": ERROR:  duplicate key value violates unique constraint "users_pkey"
DETAIL:  Key (email)=(ann@example.com) already exists.
CONTEXT:  COPY users, line 1: "1	ann@example.com	s3cret"
pg_restore: error: could not execute query: ERROR:  syntax error at or near "x"
LINE 1: INSERT INTO cards VALUES ('4111 1111 1111 1111') x
                                                         ^
Command was: INSERT INTO cards VALUES ('4111 1111 1111 1111') x;
pg_restore: warning: errors ignored on restore: 2`
	got := Scrub(stderr)
	for _, secret := range []string{"ann@example.com", "s3cret", "4111"} {
		if strings.Contains(got, secret) {
			t.Errorf("row data %q survives: %s", secret, got)
		}
	}
	if !strings.Contains(got, `duplicate key value violates unique constraint "users_pkey"`) || !strings.Contains(got, "errors ignored on restore: 2") {
		t.Errorf("what failed was dropped too: %s", got)
	}
	if lastLine("ERROR:  x\nDETAIL:  Key (id)=(7) already exists.") != "ERROR:  x" {
		t.Errorf("lastLine quotes a DETAIL line")
	}
}
