package instance_test

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// proxy forwards 127.0.0.1 connections to a port until it is cut: a
// network partition between a replica and its primary, on loopback.
type proxy struct {
	l      net.Listener
	mu     sync.Mutex
	target int
	conns  []net.Conn
	cut    bool
}

func newProxy(t *testing.T, target int) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	t.Cleanup(func() { _ = l.Close(); p.partition() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = in.Close()
				continue
			}
			out, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.target))
			if err != nil {
				p.mu.Unlock()
				_ = in.Close()
				continue
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return p
}

func (p *proxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

// heal lets new connections through again.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// retarget sends new connections to another port, and cuts the old ones.
func (p *proxy) retarget(port int) {
	p.partition()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target, p.cut = port, false
}

func (p *proxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
}
