package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func logsCmd(e *env) *cobra.Command {
	var follow bool
	var since time.Duration
	var tail int64
	cmd := &cobra.Command{
		Use:   "logs DATABASE",
		Short: "The instance managers' and PostgreSQL's logs of every instance, one line each, labelled by pod",
		Long: "Reads the postgres container of every instance. The instance manager's JSON lines become " +
			"\"time pod level message key=value...\"; PostgreSQL's records (logger postgres) show who, the SQLSTATE, detail, hint and statement.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if _, err := e.database(ctx, args[0]); err != nil {
				return err
			}
			pods := &corev1.PodList{}
			if err := e.c.List(ctx, pods, client.InNamespace(e.namespace), client.MatchingLabels{"daytwo.dev/database": args[0]}); err != nil {
				return err
			}
			if len(pods.Items) == 0 {
				return fmt.Errorf("the Database %s has no pods", args[0])
			}
			opts := &corev1.PodLogOptions{Container: "postgres", Follow: follow}
			if since > 0 {
				s := int64(since.Seconds())
				opts.SinceSeconds = &s
			}
			if tail >= 0 {
				opts.TailLines = &tail
			}
			out := &lockedWriter{w: cmd.OutOrStdout()}
			var wg sync.WaitGroup
			errs := make([]error, len(pods.Items))
			for i, p := range pods.Items {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = e.streamLogs(ctx, p.Name, opts, out)
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "Keep streaming.")
	f.DurationVar(&since, "since", 0, "Only lines newer than this (e.g. 10m).")
	f.Int64Var(&tail, "tail", -1, "Only the last lines of each instance (-1: all).")
	return cmd
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, s)
}

func (e *env) streamLogs(ctx context.Context, pod string, opts *corev1.PodLogOptions, out *lockedWriter) error {
	rc, err := e.kube.CoreV1().Pods(e.namespace).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", pod, err)
	}
	defer func() { _ = rc.Close() }()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		out.line(prettyLine(pod, sc.Text()))
	}
	return sc.Err()
}

// prettyLine renders a JSON line of the stream as "time pod level message
// key=value...", PostgreSQL's with the telling fields of its record; any
// other line follows the pod's name as it is.
func prettyLine(pod, line string) string {
	var fields map[string]any
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &fields) != nil {
		return pod + "  " + line
	}
	ts, _ := fields["ts"].(string)
	level, _ := fields["level"].(string)
	msg, _ := fields["msg"].(string)
	var keys []string
	for k := range fields {
		if !slices.Contains([]string{"ts", "level", "msg", "logger", "caller", "record"}, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		ts = t.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(&b, "%s %s %-5s %s", ts, pod, level, msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, fields[k])
	}
	if rec, ok := fields["record"].(map[string]any); ok {
		b.WriteString(pgRecordFields(rec))
	}
	return b.String()
}

// pgRecordFields are the parts of PostgreSQL's jsonlog record a reader
// wants beside its message: who, the SQLSTATE of a problem, and the
// detail, hint and statement.
func pgRecordFields(rec map[string]any) string {
	var b strings.Builder
	for _, k := range []string{"user", "dbname", "backend_type", "state_code", "detail", "hint", "context", "statement"} {
		v, ok := rec[k]
		if !ok || v == "" || k == "state_code" && v == "00000" {
			continue
		}
		fmt.Fprintf(&b, " %s=%q", k, fmt.Sprint(v))
	}
	return b.String()
}
