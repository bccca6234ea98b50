package instanceapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// maxStatusBytes bounds what the operator reads from an instance: a
// misbehaving (or compromised) pod must not make it buffer without end.
const maxStatusBytes = 1 << 20

// Client is the operator's side of the contract.
type Client struct {
	HTTP *http.Client
}

// NewClient returns a client whose calls give up after timeout.
func NewClient(timeout time.Duration) *Client {
	return &Client{HTTP: &http.Client{Timeout: timeout}}
}

// Status asks the instance manager at podIP for its status.
func (c *Client) Status(ctx context.Context, podIP string) (Status, error) {
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(Port)) + PathStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Status{}, fmt.Errorf("instance %s: %w", podIP, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("instance %s answered %s", podIP, resp.Status)
	}
	var s Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusBytes)).Decode(&s); err != nil {
		return Status{}, fmt.Errorf("instance %s: %w", podIP, err)
	}
	return s, nil
}

// Promote asks the instance manager at podIP to promote its replica; token
// is the Database's api-token. waitLSN, in a switchover, is the old
// primary's shutdown checkpoint.
func (c *Client) Promote(ctx context.Context, podIP, token, waitLSN string) error {
	// pg_promote waits up to 25 s; the status timeout is far shorter.
	return c.post(ctx, podIP, PathPromote, token, PromoteRequest{WaitLSN: waitLSN}, nil, 60*time.Second)
}

// Demote asks the primary at podIP to shut down cleanly and hand the
// primary lease to the replica to; it answers once it has.
func (c *Client) Demote(ctx context.Context, podIP, token string, req DemoteRequest) (DemoteResult, error) {
	var res DemoteResult
	err := c.post(ctx, podIP, PathDemote, token, req, &res, 90*time.Second)
	return res, err
}

// Checkpoint asks the instance manager at podIP to run CHECKPOINT.
func (c *Client) Checkpoint(ctx context.Context, podIP, token string) error {
	return c.post(ctx, podIP, PathCheckpoint, token, struct{}{}, nil, 40*time.Second)
}

// Restart asks the instance manager at podIP to restart postgres in place.
func (c *Client) Restart(ctx context.Context, podIP, token string) error {
	return c.post(ctx, podIP, PathRestart, token, struct{}{}, nil, 10*time.Second)
}

// post sends an authenticated call that changes an instance and decodes its answer into out.
func (c *Client) post(ctx context.Context, podIP, path, token string, in, out any, timeout time.Duration) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(Port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(AuthorizationHeader, "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	hc := *c.HTTP
	hc.Timeout = timeout
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("instance %s: %w", podIP, err)
	}
	defer func() { _ = resp.Body.Close() }()
	limited := io.LimitReader(resp.Body, maxStatusBytes)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		var e Error
		_ = json.NewDecoder(limited).Decode(&e)
		return fmt.Errorf("instance %s answered %s: %s", podIP, resp.Status, e.Message)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(limited).Decode(out); err != nil {
		return fmt.Errorf("instance %s: %w", podIP, err)
	}
	return nil
}
