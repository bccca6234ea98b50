package main

import (
	"testing"
	"time"
)

func TestPrettyLine(t *testing.T) {
	for in, want := range map[string]string{
		`{"level":"info","ts":"2026-11-25T02:01:56Z","logger":"instance","msg":"Promoted to primary","lsn":"0/3000060","timeline":2}`: "2026-11-25T02:01:56Z orders-0 info  Promoted to primary lsn=0/3000060 timeline=2",
		`2026-11-25 02:01:56.730 GMT [24770] LOG:  received fast shutdown request`:                                                    "orders-0  2026-11-25 02:01:56.730 GMT [24770] LOG:  received fast shutdown request",
		`{not json`: "orders-0  {not json",
		`{"level":"error","ts":"2026-11-25T02:01:56.5Z","logger":"postgres","msg":"division by zero","record":{"user":"app","dbname":"orders","error_severity":"ERROR","state_code":"22012","message":"division by zero","statement":"SELECT 1/0","backend_type":"client backend"}}`: `2026-11-25T02:01:56Z orders-0 error division by zero user="app" dbname="orders" backend_type="client backend" state_code="22012" statement="SELECT 1/0"`,
		`{"level":"info","ts":"2026-11-25T02:01:56Z","logger":"postgres","msg":"checkpoint starting: time","record":{"error_severity":"LOG","state_code":"00000","message":"checkpoint starting: time","backend_type":"checkpointer"}}`:                                              `2026-11-25T02:01:56Z orders-0 info  checkpoint starting: time backend_type="checkpointer"`,
	} {
		if got := prettyLine("orders-0", in); got != want {
			t.Errorf("prettyLine(%s)\n got %s\nwant %s", in, got, want)
		}
	}
}

// Two requests within a second are two: each is later than the last
// answered and the pending one.
func TestLaterThan(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	if got := laterThan(time.Time{}, ""); got < now.Format(time.RFC3339) {
		t.Errorf("laterThan(zero) = %s, want now", got)
	}
	future := now.Add(5 * time.Second)
	if got := laterThan(future, ""); got != future.Add(time.Second).Format(time.RFC3339) {
		t.Errorf("after an answered request at %s: %s", future, got)
	}
	if got := laterThan(now.Add(-time.Hour), now.Format(time.RFC3339)); got != now.Add(time.Second).Format(time.RFC3339) {
		t.Errorf("after a pending request at %s: %s", now, got)
	}
}
