// Command demo-web is the sample web app used by WebApp samples and e2e
// suites: it answers every path with its greeting, hostname and version, and
// serves /healthz. It shuts down gracefully on SIGTERM. With CRASH_AFTER
// (a Go duration) it exits with status 1 that long after it started, as
// a release with a latent bug would: canary e2e suites catch it.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"greeting": os.Getenv("GREETING"),
			"hostname": host,
			"version":  os.Getenv("VERSION"),
		})
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if after := os.Getenv("CRASH_AFTER"); after != "" {
		d, err := time.ParseDuration(after)
		if err != nil {
			log.Fatalf("CRASH_AFTER %q: %v", after, err) //nolint:gocritic // nothing to shut down yet
		}
		time.AfterFunc(d, func() { log.Fatalf("fatal: crashing as CRASH_AFTER=%s asks", after) })
	}
	log.Printf("demo-web listening on :%s", port)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
