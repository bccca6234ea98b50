package instanceapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Serve serves h on addr, with TLS when tlsConfig is set, until stop;
// the channel carries the server's end. The instance manager and the
// pooler manager serve their APIs and metrics with it.
func Serve(addr string, h http.Handler, tlsConfig *tls.Config) (<-chan error, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsConfig}
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()
	return serveErr, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}, nil
}

// WriteJSON answers v as JSON with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) //nolint:errchkjson // the APIs' own response types; a failed write means the client left
}
