package instance

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// A primary that hands its lease over in a switchover forwards new
// connections on its PostgreSQL port to the new primary for forwardWindow.
// The -rw Service still routes to it until its endpoints change and
// kube-proxy's next sync (up to a second more) applies them; without the
// forwarder, every connection in that stretch is refused, and the write
// pause of a switchover is the promotion plus that sync. With it, the
// pause is the old primary's clean shutdown and the promotion. Nothing is
// at stake: PostgreSQL authenticates and serves each forwarded connection
// itself, and the old primary serves none.

// forwardWindow is how long a demoted primary forwards new connections.
const forwardWindow = 3 * time.Second

// forwarder relays connections accepted on the PostgreSQL port to the new
// primary until its window ends; connections it accepted live on.
type forwarder struct {
	ln     net.Listener
	closed chan struct{}
	once   sync.Once
}

// forwardTo starts forwarding to the instance to, once postgres has
// stopped and released the port. It returns nil, and forwards nothing, when
// the port cannot be had.
func (m *Manager) forwardTo(to string) *forwarder {
	host, port := m.cfg.upstream(to)
	target := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", m.cfg.Port))
	if err != nil {
		m.log.Info("Not forwarding connections to the new primary", "reason", err.Error())
		return nil
	}
	f := &forwarder{ln: ln, closed: make(chan struct{})}
	m.log.Info("Forwarding new connections to the new primary", "to", to, "address", target, "for", forwardWindow)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, target)
		}
	}()
	time.AfterFunc(forwardWindow, f.close)
	return f
}

// close stops accepting; relayed connections carry on.
func (f *forwarder) close() {
	f.once.Do(func() {
		_ = f.ln.Close()
		close(f.closed)
	})
}

// wait returns once the window ended or ctx did, which closes it early.
func (f *forwarder) wait(ctx context.Context) {
	select {
	case <-f.closed:
	case <-ctx.Done():
		f.close()
	}
}

// relay copies between the client c and target until either side ends.
func relay(c net.Conn, target string) {
	defer func() { _ = c.Close() }()
	u, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	defer func() { _ = u.Close() }()
	// The first side to end ends both: the deferred closes stop the other copy.
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
}
