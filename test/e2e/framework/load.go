package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// HTTPLoad GETs one URL at a steady interval, each request on a new
// connection, until Stop: what an app's users see while its backend
// changes.
type HTTPLoad struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	ok       int
	failures []string
	last     string
}

// StartHTTPLoad starts GETs of url (a Service or pod of the local
// cluster) every interval. A request that cannot connect is tried again
// for up to a second, as any client does while a rollout moves a
// Service's endpoints; an answer other than 200 is a failure. It stops
// by itself after 10 minutes.
func StartHTTPLoad(url string, interval time.Duration) *HTTPLoad {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	l := &HTTPLoad{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			body, err := getRetryingConnect(ctx, client, url)
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
			} else {
				l.ok++
				l.last = body
			}
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

// getRetryingConnect GETs url, trying again for up to a second while it
// cannot connect.
func getRetryingConnect(ctx context.Context, c *http.Client, url string) (string, error) {
	deadline := time.Now().Add(time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req)
		var op *net.OpError
		if err != nil && errors.As(err, &op) && op.Op == "dial" && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return "", err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return strings.TrimSpace(string(body)), nil
	}
}

// Last is the last answer that succeeded.
func (l *HTTPLoad) Last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Succeeded is how many requests have succeeded so far.
func (l *HTTPLoad) Succeeded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// Stop ends the load and says how many requests succeeded and how each
// failure failed.
func (l *HTTPLoad) Stop() (int, []string) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.failures
}
