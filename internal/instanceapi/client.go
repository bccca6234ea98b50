package instanceapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

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
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return Status{}, fmt.Errorf("instance %s: %w", podIP, err)
	}
	return s, nil
}
