// Command e2e-client runs inside test pods to exercise what the e2e suites
// cannot reach from the host the way users do: HTTP requests and an S3 round
// trip through a Service, resolved by cluster DNS. It exits non-zero on any
// failure. (busybox's static wget cannot resolve names; Go's resolver can.)
//
//	e2e-client http URL COUNT       (prints one response body per line)
//	e2e-client s3 ENDPOINT BUCKET   (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)
//	e2e-client pg-app ENV QUERY     (serves HTTP on $PORT: GET / runs QUERY on the database the URL in $ENV
//	                                 names, with the libpq environment's TLS settings, and answers its result)
//	e2e-client writer CONNINFO TABLE
//	                                (the failover tests' application: see writer.go)
//	e2e-client pooled-writer CONNINFO TABLE
//	                                (the same through a pool: one connection kept)
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: e2e-client http URL COUNT | s3 ENDPOINT BUCKET")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "http":
		err = httpGets(ctx, os.Args[2], os.Args[3])
	case "s3":
		err = s3RoundTrip(ctx, os.Args[2], os.Args[3])
	case "pg-app":
		err = pgApp(os.Getenv(os.Args[2]), os.Args[3])
	case "writer":
		err = writer(os.Args[2], os.Args[3], false)
	case "pooled-writer":
		err = writer(os.Args[2], os.Args[3], true)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, os.Args[1]+":", err)
		os.Exit(1) //nolint:gocritic // the deferred cancel has nothing left to stop
	}
}

// httpGets GETs url count times on fresh connections, so a Service spreads
// them over its endpoints, and prints each body on one line.
func httpGets(ctx context.Context, url, count string) error {
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return fmt.Errorf("COUNT must be a positive integer, got %q", count)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := doWithRetry(client, req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		fmt.Println(strings.TrimSpace(string(body)))
	}
	return nil
}

// doWithRetry retries a request that could not connect for up to 15 s: a
// Service's endpoints reach kube-proxy's rules a moment after its pods are
// ready, and a real client would retry too. HTTP errors are not retried.
func doWithRetry(c *http.Client, req *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := c.Do(req)
		if err == nil || time.Now().After(deadline) {
			return resp, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// s3RoundTrip creates the bucket if needed, PUTs 1 MiB of random bytes, GETs
// them back and compares checksums.
func s3RoundTrip(ctx context.Context, endpoint, bucket string) error {
	c, err := minio.New(endpoint, &minio.Options{
		Creds:  credentials.NewEnvAWS(),
		Secure: false,
	})
	if err != nil {
		return err
	}
	// A Service answers a moment after its endpoints are ready (kube-proxy
	// programs the rules): retry for a bounded time.
	exists, err := c.BucketExists(ctx, bucket)
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		exists, err = c.BucketExists(ctx, bucket)
	}
	if err != nil {
		return fmt.Errorf("bucket check: %w", err)
	}
	if !exists {
		if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return fmt.Errorf("make bucket: %w", err)
		}
	}
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	want := sha256.Sum256(data)
	if _, err := c.PutObject(ctx, bucket, "e2e/object", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	obj, err := c.GetObject(ctx, bucket, "e2e/object", minio.GetObjectOptions{})
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if sha256.Sum256(got) != want {
		return fmt.Errorf("object read back differs from what was written (%d bytes)", len(got))
	}
	fmt.Printf("s3 round trip ok: %d bytes sha256 %x\n", len(got), want)
	return nil
}

// pgApp is an app that needs its database: it is ready (GET / answers 200)
// only while QUERY succeeds on a new connection to url, made the way a
// user's app makes it (pgx, which reads PGSSLMODE and PGSSLROOTCERT).
func pgApp(url, query string) error {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer func() { _ = conn.Close(context.Background()) }()
		var out string
		if err := conn.QueryRow(ctx, query).Scan(&out); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, out)
	})
	return http.ListenAndServe(":"+os.Getenv("PORT"), nil)
}
