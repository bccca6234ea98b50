package main

import "testing"

func TestPrettyLine(t *testing.T) {
	for in, want := range map[string]string{
		`{"level":"info","ts":"2026-11-25T02:01:56Z","logger":"instance","msg":"Promoted to primary","lsn":"0/3000060","timeline":2}`: "2026-11-25T02:01:56Z orders-0 info  Promoted to primary lsn=0/3000060 timeline=2",
		`2026-11-25 02:01:56.730 GMT [24770] LOG:  received fast shutdown request`:                                                    "orders-0  2026-11-25 02:01:56.730 GMT [24770] LOG:  received fast shutdown request",
		`{not json`: "orders-0  {not json",
	} {
		if got := prettyLine("orders-0", in); got != want {
			t.Errorf("prettyLine(%s)\n got %s\nwant %s", in, got, want)
		}
	}
}
