package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
)

// caMount holds the Database's CA in the pgbench pod.
const caMount = "/etc/daytwo/database"

func pgbenchCmd(e *env) *cobra.Command {
	var name string
	var dryRun bool
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "pgbench DATABASE [-- PGBENCH ARGS...]",
		Short: "Run pgbench against a Database in a Job, to size it",
		Long: "Creates a Job that runs pgbench, from the image the instances run, against the Database's read-write " +
			"Service as the application user (the credentials Secret), verifying the server's certificate. Arguments " +
			"after -- go to pgbench: -i -s 50 to initialize, then -c 10 -j 2 -T 60 -P 10 to run, say. The Job meets the " +
			"restricted Pod Security Standard and is deleted an hour after it ends. --wait prints its output.",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: e.completeNames(databases),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := e.database(ctx, args[0])
			if err != nil {
				return err
			}
			if name == "" {
				name = fmt.Sprintf("%s-pgbench-%d", db.Name, time.Now().Unix())
			}
			job, err := pgbenchJob(db, name, args[1:])
			if err != nil {
				return err
			}
			if dryRun {
				return printDryRun(cmd.OutOrStdout(), job)
			}
			if err := e.c.Create(ctx, job); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Created Job %s; its output: kubectl logs -n %s job/%s -f\n", name, e.namespace, name)
			if !w.wait {
				return nil
			}
			return w.until(ctx, "Job "+name, func(ctx context.Context) error { return e.waitJob(ctx, cmd.OutOrStdout(), job) })
		},
	}
	cmd.Flags().StringVar(&name, "job-name", "", "Name of the Job (default <database>-pgbench-<unix time>).")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Print the Job instead of creating it.")
	w.add(cmd, "the Job ends, and print its output (exit code 1 when pgbench failed, 2 on --timeout)")
	return cmd
}

func pgbenchJob(db *v1alpha1.Database, name string, args []string) (*batchv1.Job, error) {
	image := db.Status.CurrentImage
	if image == "" {
		return nil, fmt.Errorf("the Database %s reports no image yet (status.currentImage): wait until it runs", db.Name)
	}
	secret := db.CredentialsSecretName()
	env := []corev1.EnvVar{{Name: "PGSSLMODE", Value: "verify-full"}, {Name: "PGSSLROOTCERT", Value: caMount + "/" + v1alpha1.CredentialsCA}}
	for _, kv := range [][2]string{{"PGHOST", v1alpha1.CredentialsHost}, {"PGPORT", v1alpha1.CredentialsPort},
		{"PGDATABASE", v1alpha1.CredentialsDatabase}, {"PGUSER", v1alpha1.CredentialsUser}, {"PGPASSWORD", v1alpha1.CredentialsPassword}} {
		env = append(env, corev1.EnvVar{Name: kv[0], ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: kv[1]}}})
	}
	return toolJob(db.Namespace, name, "daytwo-pgbench", corev1.PodSpec{
		ImagePullSecrets: db.Spec.ImagePullSecrets,
		SecurityContext:  restrictedPod(999),
		Containers: []corev1.Container{{
			Name: "pgbench", Image: image, Command: append([]string{"pgbench"}, args...), Env: env,
			SecurityContext: restrictedContainer(),
			VolumeMounts:    []corev1.VolumeMount{{Name: "database-ca", MountPath: caMount, ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "database-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secret, Items: []corev1.KeyToPath{{Key: v1alpha1.CredentialsCA, Path: v1alpha1.CredentialsCA}}}}}},
	}), nil
}

// waitJob waits for job to end and copies its pod's output to out; a
// failed Job exits 1.
func (e *env) waitJob(ctx context.Context, out io.Writer, job *batchv1.Job) error {
	var failed bool
	err := watchObject(ctx, e, job, &batchv1.JobList{}, func(j *batchv1.Job) (bool, error) {
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				failed = c.Type == batchv1.JobFailed
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := e.c.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil {
		return err
	}
	for _, p := range pods.Items {
		logs, err := e.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return err
		}
		_, _ = out.Write(logs)
	}
	if failed {
		return exitError{code: exitFailed, err: fmt.Errorf("job %s failed", job.Name)}
	}
	return nil
}
