package instance

import (
	"io"
	"net"
	"testing"
	"time"
)

// relay waits for the next primary to be known, then copies both ways;
// the client's end ends it.
func TestRelayReachesTheNextPrimary(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = io.Copy(c, c) // echo
			_ = c.Close()
		}
	}()
	known := make(chan struct{})
	target := func() (string, bool) {
		select {
		case <-known:
			return l.Addr().String(), true
		default:
			return "", false
		}
	}
	client, server := net.Pipe()
	ended := make(chan struct{})
	go func() { relay(server, target); close(ended) }()
	close(known) // named while relay waits
	if err := client.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the relay: %q, %v", buf, err)
	}
	_ = client.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not end with its client")
	}
}
