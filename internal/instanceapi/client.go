package instanceapi

import (
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
