package instance

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Serving through a control-plane outage (instanceapi.VouchPeriod has the
// rule): a replica's promise not to be promoted, and the holder's record of
// the promises it holds.

// vouchers is the holder's side: the instances whose promises serving past
// its term needs, as its renewals recorded them on the lease, and until
// when each one's promise covers it, on its own clock.
type vouchers struct {
	mu sync.Mutex
	// recorded: a renewal recorded demand on the lease; until then this
	// holder never serves past its term.
	recorded bool
	demand   []string
	cover    map[string]time.Time
	// alive is how long the holder's own heartbeat covers it, as a
	// promise would: vouchLoop counts it each time it asks.
	alive time.Time
	// serving: the guard let the server serve past the term on them (for
	// the log).
	serving bool
}

// attempt widens demand by what a renewal is about to record: the write
// may land even if its answer is lost, and the operator then counts on it.
func (v *vouchers) attempt(list []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if list == nil {
		// The write deletes the record: if it lands, the operator may
		// promote anyone.
		v.recorded, v.demand = false, nil
	} else if v.recorded {
		v.demand = union(v.demand, list)
	}
}

// recordedAs is the demand a renewal wrote (nil: it wrote none).
func (v *vouchers) recordedAs(list []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.recorded, v.demand = list != nil, list
}

// reset forgets everything: the instance is no longer the holder.
func (v *vouchers) reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.recorded, v.demand, v.cover, v.serving, v.alive = false, nil, nil, false, time.Time{}
}

// beat counts the holder's own heartbeat, fresh at asked, like a promise:
// with no peer to ask (a single instance) it alone covers the holder, and
// a holder whose writes stall stops being covered as its peers' promises
// run out.
func (v *vouchers) beat(asked time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.alive = later(v.alive, asked.Add(instanceapi.PromiseDuration-instanceapi.LeaseFenceMargin))
}

// promised counts pod's promise, asked at asked: PromiseDuration from its
// answer on pod's clock is at least this long from asked on this one.
func (v *vouchers) promised(pod string, asked time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cover == nil {
		v.cover = map[string]time.Time{}
	}
	v.cover[pod] = later(v.cover[pod], asked.Add(instanceapi.PromiseDuration-instanceapi.LeaseFenceMargin))
}

// coveredUntil is until when the promises held and the holder's own
// heartbeat cover it (the earliest of them), and whether they do at now.
// With nobody to ask (a single instance) nobody can be promoted, and the
// heartbeat alone counts.
func (v *vouchers) coveredUntil(now time.Time) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.recorded {
		return time.Time{}, false
	}
	until := v.alive
	for _, pod := range v.demand {
		if c := v.cover[pod]; c.Before(until) {
			until = c
		}
	}
	return until, now.Before(until)
}

// targets are the instances to ask: the demand, and those about to join it.
func (v *vouchers) targets(list []string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return union(v.demand, list)
}

func (v *vouchers) setServing(on bool) (changed bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	changed, v.serving = v.serving != on, on
	return changed
}

// covers: the promises held cover this holder at now.
func (v *vouchers) covers(now time.Time) bool {
	_, ok := v.coveredUntil(now)
	return ok
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// voucherList is what a renewal records as the holder's vouchers: every
// other instance the operator lists. nil when it lists none (an instance
// run without the operator): no record, and no serving past the term.
func (m *Manager) voucherList() []string {
	r, err := m.cfg.replication()
	if err != nil || len(r.Instances) == 0 {
		return nil
	}
	list := []string{}
	for _, pod := range r.Instances {
		if pod != m.cfg.Pod {
			list = append(list, pod)
		}
	}
	slices.Sort(list)
	return list
}

// vouchLoop counts the heartbeat and asks for promises each VouchPeriod
// while the heartbeat commits, for the run of postgres as a primary that
// ctx is. It asks only over TLS: the token never travels in clear.
func (m *Manager) vouchLoop(ctx context.Context) {
	tick := time.NewTicker(instanceapi.VouchPeriod)
	defer tick.Stop()
	for {
		m.shared.mu.Lock()
		beat := m.shared.lastHeartbeat
		m.shared.mu.Unlock()
		if asked := time.Now(); asked.Sub(beat) < instanceapi.HeartbeatDeadline {
			m.vouch.beat(asked)
			m.askPromises(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// askPromises asks every target once, at the same time.
func (m *Manager) askPromises(ctx context.Context) {
	targets := m.vouch.targets(m.voucherList())
	if len(targets) == 0 || !m.cfg.TLS {
		return
	}
	hc, err := m.peerClient()
	if err != nil {
		m.log.V(1).Info("No promises asked", "reason", err.Error())
		return
	}
	token, err := m.cfg.secret(instanceapi.SecretAPIToken)
	if err != nil || token == "" {
		return
	}
	body, _ := json.Marshal(instanceapi.VouchRequest{Holder: m.cfg.Pod, LSN: m.Status().LSN}) //nolint:errchkjson // two strings always marshal
	var wg sync.WaitGroup
	for _, pod := range targets {
		addr := m.cfg.peerAPI(pod)
		if addr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			asked := time.Now()
			rctx, cancel := context.WithTimeout(ctx, instanceapi.VouchPeriod)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "https://"+addr+instanceapi.PathVouch, bytes.NewReader(body))
			req.Header.Set(instanceapi.AuthorizationHeader, "Bearer "+token)
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<12))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				m.vouch.promised(pod, asked)
			}
		}()
	}
	wg.Wait()
}

// peerAPI is where pod's instance API answers: its DNS name on
// instanceapi.Port, or Config.PeerAPIs' entry ("" when it has none).
func (c *Config) peerAPI(pod string) string {
	if c.PeerAPIs == nil {
		return net.JoinHostPort(instanceapi.PeerHost(c.Cluster, c.Namespace, pod), strconv.Itoa(instanceapi.Port))
	}
	return c.PeerAPIs[pod]
}

// peerClient is an HTTPS client that verifies other instances against the
// Database's CA (the name dialled must be in the certificate), made anew
// when the CA changes. Its connections stay open between asks, so an ask
// needs no DNS lookup while the pods stay.
func (m *Manager) peerClient() (*http.Client, error) {
	ca, err := os.ReadFile(m.cfg.tlsFiles()[instanceapi.SecretTLSCA])
	if err != nil {
		return nil, err
	}
	m.peers.mu.Lock()
	defer m.peers.mu.Unlock()
	if m.peers.http != nil && bytes.Equal(ca, m.peers.ca) {
		return m.peers.http, nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("the CA file holds no certificate")
	}
	if m.peers.http != nil {
		m.peers.http.CloseIdleConnections()
	}
	m.peers.ca = ca
	m.peers.http = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		IdleConnTimeout: time.Minute, MaxIdleConnsPerHost: 1,
	},
		// A redirect would carry the token on, perhaps in clear.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return m.peers.http, nil
}
