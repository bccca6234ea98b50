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

// A primary that stops being one relays new connections on its PostgreSQL
// port to the next primary for forwardWindow, once postgres released the
// port. The -rw Service still routes to it until its endpoints change and
// kube-proxy's next sync (up to a second more) applies them; without the
// relay, every connection in that stretch is refused, and the write pause
// is the promotion plus that sync. With it, the pause is the old primary's
// clean shutdown and the promotion. Nothing is at stake: PostgreSQL
// authenticates and serves each relayed connection itself, and the old
// primary serves none.
//
// Two occasions:
//   - a switchover hands the lease to a named replica (forwardTo);
//   - the primary's pod is deleted (relayToNextPrimary): it releases the
//     lease and relays to whichever instance the lease names next. While
//     it relays it stays ready: kube-proxy routes a Service with no ready
//     endpoint to its serving terminating ones, so the deleted pod keeps
//     -rw's traffic until the new primary is labelled, instead of leaving
//     -rw with nothing until the next sync after that. It is ready from
//     the release on, before the lease names anyone: a connection waits
//     for that (relayWait). Ready only once the lease moved, its readiness
//     failed while the operator decided, and the kubelet's next probe
//     after the move came too late to keep -rw's route.

// forwardWindow is how long a primary that stopped relays new connections.
const forwardWindow = 3 * time.Second

// forwarder relays connections accepted on the PostgreSQL port to the
// address target gives (false: none yet, the connection is closed) until
// its window ends; connections it accepted live on.
type forwarder struct {
	ln     net.Listener
	closed chan struct{}
	once   sync.Once
	target func() (string, bool)
	// serving: the instance is ready while it relays to a target.
	serving bool
	// active counts relayed connections.
	active sync.WaitGroup
}

// startForwarding listens on the PostgreSQL port postgres released, or
// returns nil when it cannot have it.
func (m *Manager) startForwarding(target func() (string, bool), serving bool) *forwarder {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", m.cfg.Port))
	if err != nil {
		m.log.Info("Not relaying connections to the next primary", "reason", err.Error())
		return nil
	}
	f := &forwarder{ln: ln, closed: make(chan struct{}), target: target, serving: serving}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.active.Add(1)
			go func() {
				defer f.active.Done()
				relay(c, target)
			}()
		}
	}()
	time.AfterFunc(forwardWindow, f.close)
	m.shared.mu.Lock()
	m.shared.forwarding = f
	m.shared.mu.Unlock()
	return f
}

// forwardTo relays to the instance to, a switchover's new primary.
func (m *Manager) forwardTo(to string) {
	host, port := m.cfg.upstream(to)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if m.startForwarding(func() (string, bool) { return addr, true }, false) != nil {
		m.log.Info("Relaying new connections to the new primary", "to", to, "address", addr, "for", forwardWindow.String())
	}
}

// relayDrain bounds how long a deleted primary waits, after its window,
// for the connections it relays to end: the process exiting would cut them,
// perhaps between a COMMIT and its answer. The pod's grace period is 60 s.
const relayDrain = 5 * time.Second

// relayToNextPrimary relays to whichever other instance the lease names,
// as the lease watch sees it, and waits until the window ends and the
// relayed connections end (relayDrain at most).
func (m *Manager) relayToNextPrimary() {
	if r, err := m.cfg.replication(); err != nil || len(r.Instances) < 2 {
		return // no other instance to take over
	}
	f := m.startForwarding(func() (string, bool) {
		holder := m.holderName()
		if holder == "" || holder == m.cfg.Pod {
			return "", false
		}
		host, port := m.cfg.upstream(holder)
		return net.JoinHostPort(host, strconv.Itoa(port)), true
	}, true)
	if f == nil {
		return
	}
	m.log.Info("Relaying new connections to the next primary while the pod terminates", "for", forwardWindow.String())
	<-f.closed
	drained := make(chan struct{})
	go func() { f.active.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(relayDrain):
		m.log.Info("Relayed connections still open; closing them", "after", relayDrain.String())
	}
}

// relaying: a forwarder that keeps the instance ready is open, whether or
// not the lease names the next primary yet (its connections wait).
func (m *Manager) relaying() bool {
	m.shared.mu.Lock()
	f := m.shared.forwarding
	m.shared.mu.Unlock()
	if f == nil || !f.serving {
		return false
	}
	select {
	case <-f.closed:
		return false
	default:
		return true
	}
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

// relayWait is how long a relayed connection waits for a target: a
// deleted primary relays from its release on, and the lease names the next
// primary once the operator moved it.
const relayWait = 2 * time.Second

// relay copies between the client c and the target until either side ends.
func relay(c net.Conn, target func() (string, bool)) {
	defer func() { _ = c.Close() }()
	addr, ok := target()
	for deadline := time.Now().Add(relayWait); !ok && time.Now().Before(deadline); addr, ok = target() {
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		return
	}
	u, err := net.DialTimeout("tcp", addr, 2*time.Second)
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
