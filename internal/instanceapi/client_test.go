package instanceapi_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// serve answers the instance API's status path on 127.0.0.1 at the
// contract's port on its own loopback address, as a pod would.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	// Any 127.x address: the client always dials the contract's port.
	for i := 2; i < 250; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(instanceapi.Port)))
		if err != nil {
			continue
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ip
	}
	t.Fatal("no free loopback address for the instance API port")
	return ""
}

// A pod that answers without end cannot make the operator buffer it: the
// client reads at most a bounded prefix and fails.
func TestStatusReadsABoundedBody(t *testing.T) {
	ip := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"pod":"orders-0","message":"`)
		chunk := strings.Repeat("x", 64<<10)
		for range 64 { // 4 MiB, four times the bound
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
		_, _ = fmt.Fprint(w, `"}`)
	})
	_, err := instanceapi.NewClient(5*time.Second).Status(context.Background(), instanceapi.Target{IP: ip})
	if err == nil {
		t.Fatal("a 4 MiB status was decoded; the body is not bounded")
	}

	ok := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, `{"pod":"orders-1","role":"replica","phase":"Running"}`)
	})
	s, err := instanceapi.NewClient(5*time.Second).Status(context.Background(), instanceapi.Target{IP: ok})
	if err != nil || s.Pod != "orders-1" || s.Role != instanceapi.RoleReplica {
		t.Fatalf("a small status: %+v, %v", s, err)
	}
}
