package instanceapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxStatusBytes bounds what the operator reads from an instance: a
// misbehaving (or compromised) pod must not make it buffer without end.
const maxStatusBytes = 1 << 20

// Client is the operator's side of the contract.
type Client struct {
	HTTP *http.Client
	// Observe, when set, hears of every call: its method and whether it
	// failed to get an answer (the operator counts them).
	Observe func(method string, err error)

	mu sync.Mutex
	// transports keeps one HTTPS transport per instance for status polls,
	// so its verified connection serves the next poll too: one request,
	// not a mutual TLS handshake on both busy sides.
	transports map[transportKey]*transport
	swept      time.Time
}

// transportKey is what a kept connection was verified for: a connection
// serves only the address and name, under the configuration, it was made for.
type transportKey struct {
	ip, serverName string
	cfg            *tls.Config
}

type transport struct {
	*http.Transport
	used time.Time
}

// transportIdle is how long an unused transport is kept: a Database
// deleted, a pod replaced or a configuration renewed leaves one behind.
const transportIdle = 2 * time.Minute

// NewClient returns a client whose calls give up after timeout.
func NewClient(timeout time.Duration) *Client {
	return &Client{HTTP: &http.Client{Timeout: timeout}}
}

// Target is one instance's API: its pod's IP and, when the instance serves
// HTTPS (FlagTLS), the configuration that verifies it (its CA) and presents
// the operator's client certificate, with the name the instance's
// certificate must carry. The configuration is shared and never changed:
// a new one (renewed certificates) makes new connections. Without TLS the
// call is plain HTTP (a pod an older daytwo made).
type Target struct {
	IP         string
	TLS        *tls.Config
	ServerName string
}

func (t Target) String() string { return t.IP }

func (t Target) url(path string) string {
	scheme := "http"
	if t.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(t.IP, strconv.Itoa(Port)) + path
}

// do sends req to t within timeout (the client's when zero).
func (c *Client) do(req *http.Request, t Target, timeout time.Duration) (*http.Response, error) {
	hc := *c.HTTP
	if timeout > 0 {
		hc.Timeout = timeout
	}
	if t.TLS != nil {
		if req.Method == http.MethodGet {
			hc.Transport = c.transport(t)
		} else {
			// A call that changes the instance gets a connection of its
			// own: Go does not resend a POST on a kept connection that
			// the instance closed meanwhile (its manager restarted), and
			// a demote or promote that failed so is not retried.
			tr := newTransport(t)
			tr.DisableKeepAlives = true
			hc.Transport = tr
		}
	}
	resp, err := hc.Do(req)
	if c.Observe != nil {
		c.Observe(req.Method, err)
	}
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", t, err)
	}
	return resp, nil
}

// transport is t's kept transport, made on first use; it drops those
// unused for transportIdle, closing their connections.
func (c *Client) transport(t Target) *transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.swept) > transportIdle/2 {
		c.swept = now
		for k, tr := range c.transports {
			if now.Sub(tr.used) > transportIdle {
				tr.CloseIdleConnections()
				delete(c.transports, k)
			}
		}
	}
	key := transportKey{ip: t.IP, serverName: t.ServerName, cfg: t.TLS}
	tr, ok := c.transports[key]
	if !ok {
		h := newTransport(t)
		h.MaxIdleConnsPerHost = 2
		tr = &transport{Transport: h}
		if c.transports == nil {
			c.transports = map[transportKey]*transport{}
		}
		c.transports[key] = tr
	}
	tr.used = now
	return tr
}

// newTransport verifies t's certificate by t's CA and name, and presents
// the operator's client certificate.
func newTransport(t Target) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = t.TLS.Clone()
	tr.TLSClientConfig.ServerName = t.ServerName
	return tr
}

// Status asks the instance manager at t for its status.
func (c *Client) Status(ctx context.Context, t Target) (Status, error) {
	return c.status(ctx, t, PathStatus)
}

// FreshStatus asks the instance manager at t for its status with its WAL
// positions read now (QueryFresh).
func (c *Client) FreshStatus(ctx context.Context, t Target) (Status, error) {
	return c.status(ctx, t, PathStatus+"?"+QueryFresh+"=true")
}

func (c *Client) status(ctx context.Context, t Target, path string) (Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url(path), nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := c.do(req, t, 0)
	if err != nil {
		return Status{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("instance %s answered %s", t, resp.Status)
	}
	var s Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusBytes)).Decode(&s); err != nil {
		return Status{}, fmt.Errorf("instance %s: %w", t, err)
	}
	return s, nil
}

// Promote asks the instance manager at t to promote its replica; token
// is the Database's api-token. waitLSN, in a switchover, is the old
// primary's shutdown checkpoint.
func (c *Client) Promote(ctx context.Context, t Target, token, waitLSN string) error {
	// pg_promote waits up to 25 s; the status timeout is far shorter.
	return c.post(ctx, t, PathPromote, token, PromoteRequest{WaitLSN: waitLSN}, nil, 60*time.Second)
}

// Demote asks the primary at t to shut down cleanly and hand the
// primary lease to the replica to; it answers once it has.
func (c *Client) Demote(ctx context.Context, t Target, token string, req DemoteRequest) (DemoteResult, error) {
	var res DemoteResult
	err := c.post(ctx, t, PathDemote, token, req, &res, 90*time.Second)
	return res, err
}

// Checkpoint asks the instance manager at t to run CHECKPOINT.
func (c *Client) Checkpoint(ctx context.Context, t Target, token string) error {
	return c.post(ctx, t, PathCheckpoint, token, struct{}{}, nil, 40*time.Second)
}

// Fence asks the instance manager at t to fence its instance on request,
// or to lift that fence.
func (c *Client) Fence(ctx context.Context, t Target, token string, fenced bool) error {
	return c.post(ctx, t, PathFence, token, FenceRequest{Fenced: fenced}, nil, 10*time.Second)
}

// Restart asks the instance manager at t to restart postgres in place.
func (c *Client) Restart(ctx context.Context, t Target, token string) error {
	return c.post(ctx, t, PathRestart, token, struct{}{}, nil, 10*time.Second)
}

// post sends an authenticated call that changes an instance and decodes its answer into out.
func (c *Client) post(ctx context.Context, t Target, path, token string, in, out any, timeout time.Duration) error {
	if t.TLS == nil {
		// Whoever answers at that address, without daytwo's certificate,
		// would get the token in clear.
		return fmt.Errorf("refusing to send the API token to %s over plain HTTP: the instance serves no TLS", t.IP)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url(path), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(AuthorizationHeader, "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(req, t, timeout)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	limited := io.LimitReader(resp.Body, maxStatusBytes)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		var e Error
		_ = json.NewDecoder(limited).Decode(&e)
		return fmt.Errorf("instance %s answered %s: %s", t, resp.Status, e.Message)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(limited).Decode(out); err != nil {
		return fmt.Errorf("instance %s: %w", t, err)
	}
	return nil
}
