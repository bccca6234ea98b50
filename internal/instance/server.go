package instance

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Handler serves the instanceapi contract.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+instanceapi.PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// The probes' paths answer anyone (the kubelet has no client
	// certificate): the answer says ready or not, nothing more.
	mux.HandleFunc("GET "+instanceapi.PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		s := m.Status()
		ready := m.ready(r.Context(), s)
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]bool{"ready": ready})
	})
	// Beyond the probes, every call needs the operator's client
	// certificate (with TLS), and every call that changes the instance its
	// token too.
	mux.HandleFunc("GET "+instanceapi.PathStatus, m.withClientCertificate(func(w http.ResponseWriter, r *http.Request) {
		var now positions
		if r.URL.Query().Get(instanceapi.QueryFresh) == "true" {
			now = m.readPositions(r.Context())
		}
		s := m.Status()
		// Only for the server read: a promotion or a stop meanwhile
		// changes what the positions mean.
		if now.read && s.Phase == instanceapi.PhaseRunning && s.InRecovery == now.inRecovery {
			s.LSN, s.ReceivedLSN, s.PositionsReadNow = now.lsn, now.received, true
		}
		s.Ready = m.ready(r.Context(), s)
		writeJSON(w, http.StatusOK, s)
	}))
	for path, h := range map[string]http.HandlerFunc{instanceapi.PathPromote: m.handlePromote, instanceapi.PathDemote: m.handleDemote,
		instanceapi.PathRestart: m.handleRestart, instanceapi.PathFence: m.handleFence, instanceapi.PathCheckpoint: m.handleCheckpoint, instanceapi.PathRoles: m.handleRoles, instanceapi.PathDatabases: m.handleDatabases,
		instanceapi.PathPoolerAuth: m.handlePoolerAuth} {
		mux.HandleFunc("POST "+path, m.withClientCertificate(m.withToken(h)))
	}
	// Another instance asks for a promise, not the operator: no client
	// certificate (instances have none), the token over TLS.
	mux.HandleFunc("POST "+instanceapi.PathVouch, m.withToken(m.handleVouch))
	return mux
}

// withToken answers 401 unless the request carries the API token.
func (m *Manager) withToken(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !m.authorized(r) {
			writeJSON(w, http.StatusUnauthorized, instanceapi.Error{Message: "a valid bearer token is required"})
			return
		}
		h(w, r)
	}
}

// ready: PostgreSQL answers now, bootstrap is done, a replica streams from
// its primary (the status refreshes every second), and a primary holds a
// valid lease; or a primary restarts in place (restartingInPlace); or a
// deleted primary relays to the next one (relayToNextPrimary). A primary
// that handed over in a switchover is not ready while it relays
// (forwardTo): the operator moves -rw to the new primary at once.
//
// An instance fenced on request is ready once postgres is down: it is
// where its Database asked it to be. The operator labels its pod
// "fenced" before it asks, which keeps it out of the Services and of the
// replicas' disruption budget; a fenced pod that never turned ready
// would hold the StatefulSet (OrderedReady) from recreating or adding
// any instance of a higher ordinal, and the rollout from going on.
func (m *Manager) ready(ctx context.Context, s instanceapi.Status) bool {
	if m.restartingInPlace() || m.relaying() {
		return true
	}
	if s.Phase == instanceapi.PhaseFenced {
		return s.FencedOnRequest // not once the fence is lifted
	}
	// A replica Database's instance follows its source's archive, which
	// is not streaming: it is ready once it runs (a demoted one too,
	// before its restart gives it the source).
	replaying := s.Streaming || m.streamJustLost() || s.Source != nil || following(m.holderName())
	if s.Phase != instanceapi.PhaseRunning || (s.Role == instanceapi.RoleReplica && !replaying) ||
		(s.Role == instanceapi.RolePrimary && !m.leaseFresh()) {
		return false
	}
	return m.ping(ctx)
}

// streamLossGrace is how long a replica that was streaming stays ready
// after it stopped. At a failover or a switchover every replica stops
// streaming for a moment, and the one being promoted is -rw's next
// endpoint: had it turned not ready (two probes a second apart), the
// kubelet would mark it ready again only at its first probe after the
// promotion, and -rw would have no endpoint until then. Longer, and a
// replica cut off from its primary serves older data before -ro drops it.
const streamLossGrace = 3 * time.Second

// streamJustLost: this replica streamed until less than streamLossGrace
// ago. A replica that has not streamed since it started gets no grace.
func (m *Manager) streamJustLost() bool {
	m.shared.mu.Lock()
	defer m.shared.mu.Unlock()
	return !m.shared.streamLost.IsZero() && time.Since(m.shared.streamLost) < streamLossGrace
}

// ping checks that postgres answers a query on its socket, at most once
// per pingFresh whoever asks (pinger).
func (m *Manager) ping(ctx context.Context) bool {
	m.pingOnce.Do(func() { m.pinger.check = m.pingNow })
	return m.pinger.answer(ctx)
}

// pingNow checks that postgres answers a query on its socket right now.
func (m *Manager) pingNow(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, m.localDSN())
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return conn.Ping(ctx) == nil
}

func writeJSON(w http.ResponseWriter, code int, v any) { instanceapi.WriteJSON(w, code, v) }

// handleRestart hands a restart in place to the supervisor and answers 202
// once it took it.
func (m *Manager) handleRestart(w http.ResponseWriter, r *http.Request) {
	if s := m.Status(); s.Phase != instanceapi.PhaseRunning {
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: "instance is in phase " + string(s.Phase)})
		return
	}
	select {
	case m.restartReq <- struct{}{}:
		writeJSON(w, http.StatusAccepted, m.Status())
	case <-time.After(2 * time.Second):
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: "the instance is busy (a switchover or a restart under way)"})
	case <-r.Context().Done():
	}
}

// handleCheckpoint runs CHECKPOINT, bounded to 30 s, outside the
// supervisor: fencing goes on meanwhile.
func (m *Manager) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := checkpoint(ctx, m.localDSN(), false); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, m.Status())
}

// freshWait bounds readPositions: past it the answer keeps the last
// observation's positions.
const freshWait = 500 * time.Millisecond

// positions are a running server's WAL positions, as Status has them.
type positions struct {
	read          bool
	inRecovery    bool
	lsn, received string
}

// readPositions reads the server's WAL positions now, on a connection of
// its own, for an answer that must postdate a primary's stop (see
// instanceapi.PathStatus). A server that does not answer in time (or does
// not run) reads none; the handler keeps them only for a running instance.
func (m *Manager) readPositions(ctx context.Context) positions {
	var p positions
	ctx, cancel := context.WithTimeout(ctx, freshWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, m.localDSN())
	if err != nil {
		return p
	}
	defer func() { _ = conn.Close(context.Background()) }()
	err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), "+walPositions).Scan(&p.inRecovery, &p.lsn, &p.received)
	p.read = err == nil
	return p
}

// serveAPI serves the instance API (HTTPS with Config.TLS) until stop.
func (m *Manager) serveAPI() (<-chan error, func(), error) {
	var tlsConfig *tls.Config
	if m.cfg.TLS {
		tlsConfig = m.cfg.apiTLSConfig()
	}
	return instanceapi.Serve(m.cfg.HTTPAddress, m.Handler(), tlsConfig)
}

// serveOnPrimary serves a call that changes what a team declared (roles,
// databases) on the running primary: it decodes the body into req, checks
// it, connects to postgres (in database db, else in postgres) and answers
// what apply returns, within timeout.
func (m *Manager) serveOnPrimary(w http.ResponseWriter, r *http.Request, what string, req any, check func() error, timeout time.Duration, db string,
	apply func(context.Context, *pgx.Conn) (any, error)) {
	if s := m.Status(); s.Role != instanceapi.RolePrimary || s.Phase != instanceapi.PhaseRunning {
		writeJSON(w, http.StatusConflict, instanceapi.Error{Message: fmt.Sprintf("%s are applied on the running primary; this instance is a %s in phase %s", what, s.Role, s.Phase)})
		return
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(req); err != nil {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: "the body is not a request for " + what + ": " + err.Error()})
		return
	}
	if err := check(); err != nil {
		writeJSON(w, http.StatusBadRequest, instanceapi.Error{Message: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, m.localDSNFor(db))
	if err != nil && db != "postgres" {
		conn, err = pgx.Connect(ctx, m.localDSN())
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: "cannot reach postgres: " + err.Error()})
		return
	}
	defer func() { _ = conn.Close(context.Background()) }()
	res, err := apply(ctx, conn)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, instanceapi.Error{Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}
