package instance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/postgres"
)

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
	m.shared.mu.Lock()
	holder, role := m.shared.holder, m.shared.status.Role
	m.shared.mu.Unlock()
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
