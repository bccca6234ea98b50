package instance

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

// Serving through a control-plane outage (instanceapi.VouchPeriod has the
// rule): a replica's promise not to be promoted, and the holder's record of
// the promises it holds.

// promise is this instance's promise to a lease holder not to become a
// primary until a time. It is written to the volume (Config.promiseFile)
// before it is given, so the next run of the manager keeps it; and it is
// closed for good once this instance starts to become a primary (claim), so
// a holder can never count on a promise from an instance promoting itself.
type promise struct {
	mu     sync.Mutex
	path   string
	holder string
	until  time.Time
	closed bool
	// lsn is the WAL position holder gave with its last ask.
	lsn string
}

// errPromised: the instance promised a holder not to become a primary.
var errPromised = errors.New("promised the primary lease holder not to become a primary")

// load reads the promise an earlier run recorded. Its time is another run's
// wall clock, perhaps on another node: MaxClockSkew is added. A record it
// cannot read counts as a promise made now, to nobody in particular.
func (p *promise) load(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := os.ReadFile(p.path)
	if os.IsNotExist(err) {
		return
	}
	holder, at, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	until, perr := time.Parse(time.RFC3339Nano, at)
	if err != nil || perr != nil {
		p.holder, p.until = "an earlier lease holder", now.Add(instanceapi.PromiseDuration)
		return
	}
	p.holder, p.until = holder, until.Round(0).Add(instanceapi.MaxClockSkew)
}

// give promises holder, at WAL position lsn, recording it first.
func (p *promise) give(holder, lsn string, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("this instance is becoming a primary")
	}
	until := now.Add(instanceapi.PromiseDuration)
	if err := writeFileAtomic(p.path, holder+"\n"+until.UTC().Format(time.RFC3339Nano)+"\n"); err != nil {
		return err
	}
	p.holder, p.until, p.lsn = holder, until, lsn
	return nil
}

// forgetVouched drops the WAL position a holder gave, when the lease names
// another: it measured that holder's writes, not the next one's.
func (p *promise) forgetVouched(holder string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holder != holder {
		p.lsn = ""
	}
}

// vouched is the last holder promised and the WAL position it gave.
func (p *promise) vouched() (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holder, p.lsn
}

// active is the holder promised, while the promise lasts.
func (p *promise) active(now time.Time) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holder, p.holder != "" && now.Before(p.until)
}

// claim closes the promise as this instance becomes a primary, unless it
// still binds: a promise to another holder that did not give the lease up
// (released names the holder that released it, "" none; handedOver, the
// holder before handed it over in a switchover).
func (p *promise) claim(self, released string, handedOver bool, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holder != "" && p.holder != self && p.holder != released && !handedOver && now.Before(p.until) {
		return fmt.Errorf("%w (%s, for %s more)", errPromised, p.holder, p.until.Sub(now).Round(time.Millisecond))
	}
	p.closed = true
	return nil
}

// reopen lets a replica promise again (it runs as a replica once more).
func (p *promise) reopen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = false
}

// apiWatch is what this instance knows of its own reach to the
// Kubernetes API: when the lease watch last saw a change (a holder renews
// each LeaseRenewPeriod), and the last lease read vouching made.
type apiWatch struct {
	mu      sync.Mutex
	seen    time.Time
	checked time.Time
	// failed: the last read failed (and none runs now).
	failed, reading bool
}

func (a *apiWatch) saw(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = now
}

// reachesAPI: this instance read the lease lately. A replica promises only
// while it does not: in a control-plane outage, not when the holder alone
// is cut off from the API (the operator then fails over, as it should). It
// reads the lease itself (at most once per VouchPeriod, bounded by
// VouchReadLimit) only when the watch saw nothing for two renewal periods.
func (m *Manager) reachesAPI(ctx context.Context) bool {
	if m.lease == nil {
		return false
	}
	a := &m.apiWatch
	a.mu.Lock()
	now := time.Now()
	if now.Sub(a.seen) < 2*instanceapi.LeaseRenewPeriod {
		a.mu.Unlock()
		return true
	}
	if a.reading || now.Sub(a.checked) < instanceapi.VouchPeriod {
		// A read under way, or one a moment ago: only its failure says
		// the API is out of reach.
		failed := a.failed && !a.reading
		a.mu.Unlock()
		return !failed
	}
	a.checked, a.reading = now, true
	a.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, instanceapi.VouchReadLimit)
	defer cancel()
	_, err := m.lease.View(rctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failed, a.reading = err != nil, false
	return !a.failed
}

func (c *Config) promiseFile() string {
	return filepath.Join(filepath.Dir(filepath.Clean(c.PGData)), instanceapi.PromiseFile)
}

// handleVouch promises the holder asking (instanceapi.PathVouch), unless
// this instance is a primary, is becoming one, or knows the lease names
// another holder.
func (m *Manager) handleVouch(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.VouchRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<12)).Decode(&req); err != nil || req.Holder == "" || len(req.Holder) > 253 {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: "holder: a lease holder's pod name is required"})
		return
	}
	if m.reachesAPI(r.Context()) {
		// Then so may the operator, which promotes another once the
		// holder's lease runs out: the holder must renew it, not ride on.
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: "this instance reaches the Kubernetes API"})
		return
	}
	m.mu.Lock()
	holder, role := m.holder, m.status.Role
	m.mu.Unlock()
	switch {
	case role == instanceapi.RolePrimary || req.Holder == m.cfg.Pod:
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: "this instance is a primary"})
		return
	case holder != "" && holder != req.Holder:
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: "the primary lease names " + holder})
		return
	}
	if _, ok := postgres.ParseLSN(req.LSN); !ok {
		req.LSN = ""
	}
	if err := m.promise.give(req.Holder, req.LSN, time.Now()); err != nil {
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, instanceapi.VouchResult{PromiseMillis: instanceapi.PromiseDuration.Milliseconds()})
}

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
// other instance the operator lists. nil when it lists none (an operator
// from before the list): no record, and no serving past the term.
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
		m.mu.Lock()
		beat := m.lastHeartbeat
		m.mu.Unlock()
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
	m.peerMu.Lock()
	defer m.peerMu.Unlock()
	if m.peerHTTP != nil && bytes.Equal(ca, m.peerCA) {
		return m.peerHTTP, nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("the CA file holds no certificate")
	}
	if m.peerHTTP != nil {
		m.peerHTTP.CloseIdleConnections()
	}
	m.peerCA = ca
	m.peerHTTP = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		IdleConnTimeout: time.Minute, MaxIdleConnsPerHost: 1,
	},
		// A redirect would carry the token on, perhaps in clear.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return m.peerHTTP, nil
}
