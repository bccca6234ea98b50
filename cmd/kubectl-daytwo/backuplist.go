package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
)

// backupListCmd lists what a DatabaseBackup's storage holds, read there:
// the bucket is often reachable from the cluster only, and its credentials
// (or the workload identity) are the cluster's, so a pod reads it, as a
// backup Job would, and prints the manifests.
func backupListCmd(e *env) *cobra.Command {
	var out outputFlag
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "list DATABASEBACKUP|DATABASE",
		Short: "The backups stored in a DatabaseBackup's bucket (or volume), read there by a pod, newest first",
		Long: "Runs a pod with the instance manager's image, the DatabaseBackup's storage and credentials (or its " +
			"Database's ServiceAccount for workload identity) and its series key, which lists the manifests that verify " +
			"under that key, as a restore would find them: also those the status no longer lists, and after the " +
			"DatabaseBackup's own records are gone. The pod is deleted after.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: e.completeNames(backups),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			b, err := e.backupFor(ctx, args[0])
			if err != nil {
				return err
			}
			image, err := e.instanceImage(ctx, b.Spec.DatabaseRef.Name)
			if err != nil {
				return err
			}
			logs, err := e.runListPod(ctx, b, image)
			if err != nil {
				return err
			}
			var ms []backup.Manifest
			line := lastLine(logs)
			if err := json.Unmarshal([]byte(line), &ms); err != nil {
				return fmt.Errorf("the list pod printed no list: %s", strings.TrimSpace(string(logs)))
			}
			switch out.format {
			case "json":
				b, err := json.MarshalIndent(ms, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				return err
			case "yaml":
				b, err := yaml.Marshal(ms)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			printManifests(cmd, b, ms)
			return nil
		},
	}
	out.add(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "How long to wait for the pod's list.")
	return cmd
}

func printManifests(cmd *cobra.Command, b *v1alpha1.DatabaseBackup, ms []backup.Manifest) {
	w := cmd.OutOrStdout()
	if len(ms) == 0 {
		fmt.Fprintf(w, "No backups of DatabaseBackup %s's series in its storage\n", b.Name)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMETHOD\tEND\tSIZE\tPOSTGRESQL\tENCRYPTED")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\n", m.ID, m.Method, m.End.UTC().Format(time.RFC3339),
			resource.NewQuantity(m.Bytes, resource.BinarySI).String(), m.PGVersion, m.Encrypted)
	}
	_ = tw.Flush()
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// instanceImage is the image of the Database's instance manager: its
// StatefulSet's first init container copies it into every instance.
func (e *env) instanceImage(ctx context.Context, db string) (string, error) {
	sts := &appsv1.StatefulSet{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: db}, sts); err != nil {
		return "", fmt.Errorf("the instance manager's image, from the StatefulSet of Database %s: %w", db, err)
	}
	if len(sts.Spec.Template.Spec.InitContainers) == 0 {
		return "", fmt.Errorf("the StatefulSet of Database %s has no instance manager", db)
	}
	return sts.Spec.Template.Spec.InitContainers[0].Image, nil
}

// runListPod runs `daytwo backup list` against b's storage and returns its
// output.
func (e *env) runListPod(ctx context.Context, b *v1alpha1.DatabaseBackup, image string) ([]byte, error) {
	storage, env, vols, mounts := series.Storage(b, "")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: fmt.Sprintf("%s-list-%d", b.Name, time.Now().Unix()),
			Labels: map[string]string{"app.kubernetes.io/name": "daytwo-backup-list", "app.kubernetes.io/instance": b.Name,
				"app.kubernetes.io/managed-by": "kubectl-daytwo"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			ActiveDeadlineSeconds:        ptr.To[int64](300),
			SecurityContext:              restrictedPod(65532),
			Containers: []corev1.Container{{
				Name: "list", Image: image, Command: []string{"/daytwo", "backup", "list"}, Args: storage.Args(""), Env: env,
				VolumeMounts:    mounts,
				SecurityContext: restrictedContainer(),
			}},
			Volumes: vols,
		},
	}
	if series.NeedsIdentity(b) {
		pod.Spec.ServiceAccountName = series.ServiceAccountName(b.Spec.DatabaseRef.Name)
	}
	db := &v1alpha1.Database{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseRef.Name}, db); err == nil {
		pod.Spec.ImagePullSecrets = db.Spec.ImagePullSecrets
	}
	if err := e.c.Create(ctx, pod); err != nil {
		return nil, err
	}
	defer func() {
		_ = e.c.Delete(context.WithoutCancel(ctx), pod, client.PropagationPolicy(metav1.DeletePropagationBackground))
	}()
	var phase corev1.PodPhase
	err := watchObject(ctx, e, pod, &corev1.PodList{}, func(p *corev1.Pod) (bool, error) {
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for pod %s: %w", pod.Name, err)
	}
	logs, err := e.kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	if phase == corev1.PodFailed {
		return nil, fmt.Errorf("listing the storage failed: %s", bytes.TrimSpace(logs))
	}
	return logs, nil
}
