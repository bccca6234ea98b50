package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// secretName matches environment variable names whose values a report
// never shows.
var secretName = regexp.MustCompile(`(?i)pass|secret|token|key|credential`)

func reportCmd(e *env) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report DATABASE",
		Short: "A support bundle (tar.gz): specs, statuses, events and logs of a Database and what daytwo made for it, secrets redacted",
		Long: "Collects the Database, its DatabaseBackups, StatefulSet, pods, Services, PVCs, Jobs, ConfigMaps and the Events " +
			"about them, and every container's log (and the previous one after a restart). Secrets appear by name and key " +
			"only, and environment values of names that look secret are replaced.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(databases),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := e.database(ctx, args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = fmt.Sprintf("daytwo-report-%s-%s-%s.tar.gz", e.namespace, db.Name, time.Now().UTC().Format("20060102T150405Z"))
			}
			return writeBundleFile(cmd, out, func(w io.Writer) (int, error) { return e.writeReport(ctx, w, db) })
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "The file to write (default daytwo-report-<namespace>-<database>-<time>.tar.gz).")
	cmd.AddCommand(reportOperatorCmd(e))
	return cmd
}

// writeBundleFile writes a bundle into the file out and says so.
func writeBundleFile(cmd *cobra.Command, out string, write func(io.Writer) (int, error)) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	n, err := write(f)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Wrote %s: %d files\n", out, n)
	return f.Close()
}

type bundle struct {
	tw *tar.Writer
	n  int
}

func (b *bundle) add(name string, content []byte) error {
	if err := b.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Now()}); err != nil {
		return err
	}
	_, err := b.tw.Write(content)
	b.n++
	return err
}

func (b *bundle) addYAML(name string, obj any) error {
	y, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return b.add(name, y)
}

func (e *env) writeReport(ctx context.Context, w io.Writer, db *v1alpha1.Database) (int, error) {
	gz := gzip.NewWriter(w)
	b := &bundle{tw: tar.NewWriter(gz)}
	sel := client.MatchingLabels{"daytwo.dev/database": db.Name}
	in := client.InNamespace(e.namespace)
	var names []string // every object the Events may be about
	stripped := func(o client.Object) client.Object {
		o.SetManagedFields(nil)
		names = append(names, o.GetName())
		return o
	}
	if err := b.addYAML("database.yaml", stripped(db)); err != nil {
		return b.n, err
	}
	backups, err := e.backupsOf(ctx, db.Name)
	if err != nil {
		return b.n, err
	}
	for i := range backups {
		stripped(&backups[i])
	}
	if err := b.addYAML("databasebackups.yaml", backups); err != nil {
		return b.n, err
	}
	lists := []struct {
		file string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"statefulsets.yaml", &appsv1.StatefulSetList{}, []client.ListOption{in, sel}},
		{"services.yaml", &corev1.ServiceList{}, []client.ListOption{in, sel}},
		{"persistentvolumeclaims.yaml", &corev1.PersistentVolumeClaimList{}, []client.ListOption{in, sel}},
		{"configmaps.yaml", &corev1.ConfigMapList{}, []client.ListOption{in, sel}},
		{"jobs.yaml", &batchv1.JobList{}, []client.ListOption{in}},
		{"secrets.yaml", &corev1.SecretList{}, []client.ListOption{in, sel}},
	}
	pods := &corev1.PodList{}
	if err := e.c.List(ctx, pods, in, sel); err != nil {
		return b.n, err
	}
	for _, l := range lists {
		if err := e.c.List(ctx, l.list, l.opts...); err != nil {
			return b.n, fmt.Errorf("%s: %w", l.file, err)
		}
		items, err := metaItems(l.list)
		if err != nil {
			return b.n, err
		}
		var keep []client.Object
		for _, o := range items {
			if j, ok := o.(*batchv1.Job); ok && !ownedByAny(j, db, backups) {
				continue
			}
			if s, ok := o.(*corev1.Secret); ok {
				redactSecret(s)
			}
			keep = append(keep, stripped(o))
		}
		if err := b.addYAML(l.file, keep); err != nil {
			return b.n, err
		}
	}
	for i := range pods.Items {
		redactPod(stripped(&pods.Items[i]).(*corev1.Pod))
	}
	if err := b.addYAML("pods.yaml", pods.Items); err != nil {
		return b.n, err
	}
	events := &corev1.EventList{}
	if err := e.c.List(ctx, events, in); err != nil {
		return b.n, err
	}
	var about []corev1.Event
	for _, ev := range events.Items {
		for _, n := range names {
			if ev.InvolvedObject.Name == n {
				ev.ManagedFields = nil
				about = append(about, ev)
				break
			}
		}
	}
	if err := b.addYAML("events.yaml", about); err != nil {
		return b.n, err
	}
	if err := e.addPodLogs(ctx, b, pods.Items); err != nil {
		return b.n, err
	}
	if err := b.tw.Close(); err != nil {
		return b.n, err
	}
	return b.n, gz.Close()
}

// addPodLogs adds every container's log of pods, and the previous one
// after a restart.
func (e *env) addPodLogs(ctx context.Context, b *bundle, pods []corev1.Pod) error {
	for _, p := range pods {
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			for _, previous := range []bool{false, true} {
				raw, err := e.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: previous}).DoRaw(ctx)
				if err != nil {
					continue // no previous container, or not started
				}
				name := fmt.Sprintf("logs/%s/%s.log", p.Name, c.Name)
				if previous {
					name = fmt.Sprintf("logs/%s/%s.previous.log", p.Name, c.Name)
				}
				if err := b.add(name, raw); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func metaItems(list client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		co, ok := o.(client.Object)
		if !ok {
			return nil, fmt.Errorf("unexpected item %T", o)
		}
		out = append(out, co)
	}
	return out, nil
}

// ownedByAny: the Job belongs to the Database or one of its backups.
func ownedByAny(j *batchv1.Job, db *v1alpha1.Database, backups []v1alpha1.DatabaseBackup) bool {
	owner := metav1.GetControllerOf(j)
	if owner == nil {
		return false
	}
	if owner.UID == db.UID {
		return true
	}
	for _, b := range backups {
		if owner.UID == b.UID {
			return true
		}
	}
	return false
}

// redactSecret keeps a Secret's keys and sizes, never its values.
func redactSecret(s *corev1.Secret) {
	redacted := map[string]string{}
	for k, v := range s.Data {
		redacted[k] = fmt.Sprintf("<redacted: %d bytes>", len(v))
	}
	s.Data, s.StringData = nil, redacted
	delete(s.Annotations, corev1.LastAppliedConfigAnnotation)
}

// redactPod replaces literal environment values whose names look secret.
func redactPod(p *corev1.Pod) {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for j, v := range cs[i].Env {
				if v.Value != "" && secretName.MatchString(v.Name) {
					cs[i].Env[j].Value = "<redacted>"
				}
			}
		}
	}
	delete(p.Annotations, corev1.LastAppliedConfigAnnotation)
}
