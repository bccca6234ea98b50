package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DefaultFioImage is Debian's fio, built by make images (hack/images.sh)
// as the PgBouncer image is; --image names another.
const DefaultFioImage = "localhost/fio:3.39"

// fioOptions are what the fio Job measures on.
type fioOptions struct {
	name, storageClass, size, image string
	runtime                         time.Duration
}

func fioCmd(e *env) *cobra.Command {
	var o fioOptions
	var dryRun bool
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "fio NAME --storage-class CLASS [--size 2Gi]",
		Short: "Measure a StorageClass as PostgreSQL uses it, with fio in a Job, to size a Database's storage",
		Long: "Creates a PersistentVolumeClaim of the StorageClass and a Job that runs fio on it: 8 KiB random reads " +
			"and writes (PostgreSQL's page) with fsync, as data files see them, then 1 MiB sequential writes, as the " +
			"WAL sees them; direct I/O, each for --runtime. The claim belongs to the Job, which goes an hour after it " +
			"ends, and the claim with it. The Job meets the restricted Pod Security Standard. --wait prints fio's report.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			o.name = args[0]
			if _, err := resource.ParseQuantity(o.size); err != nil {
				return fmt.Errorf("--size %q: %w", o.size, err)
			}
			if o.runtime < time.Second {
				return fmt.Errorf("--runtime %s: at least 1s", o.runtime)
			}
			job, pvc := fioJob(e.namespace, o)
			if dryRun {
				return printDryRun(cmd.OutOrStdout(), pvc, job)
			}
			if err := e.c.Create(ctx, job); err != nil {
				return err
			}
			// The claim is the Job's: it goes with the Job.
			pvc.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
			if err := e.c.Create(ctx, pvc); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Created Job %s and its PersistentVolumeClaim (%s of %s); its report: kubectl logs -n %s job/%s -f\n",
				o.name, o.size, o.storageClass, e.namespace, o.name)
			if !w.wait {
				return nil
			}
			return w.until(ctx, "Job "+o.name, func(ctx context.Context) error { return e.waitJob(ctx, cmd.OutOrStdout(), job) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.storageClass, "storage-class", "", "The StorageClass to measure (default: the cluster's default).")
	f.StringVar(&o.size, "size", "2Gi", "The claim's size; fio's three files take three quarters of it.")
	f.DurationVar(&o.runtime, "runtime", time.Minute, "How long each of the two measurements runs.")
	f.StringVar(&o.image, "image", DefaultFioImage, "An image with fio on its PATH.")
	f.BoolVar(&dryRun, "dry-run", false, "Print the claim and the Job instead of creating them.")
	w.add(cmd, "the Job ends, and print fio's report (exit code 1 when fio failed, 2 on --timeout)")
	return cmd
}

// fioPodSecurity is restricted, and owns the claim's files (fsGroup).
func fioPodSecurity() *corev1.PodSecurityContext {
	sc := restrictedPod(65532)
	sc.FSGroup = ptr.To[int64](65532)
	return sc
}

func fioJob(ns string, o fioOptions) (*batchv1.Job, *corev1.PersistentVolumeClaim) {
	size := resource.MustParse(o.size)
	file := resource.NewQuantity(size.Value()/4, resource.BinarySI) // 2 data files and the WAL file
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: o.name, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/name": "daytwo-fio", "app.kubernetes.io/managed-by": "kubectl-daytwo"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if o.storageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(o.storageClass)
	}
	runtime := fmt.Sprintf("%ds", int(o.runtime.Seconds()))
	args := []string{"--directory=/data", "--size=" + fmt.Sprint(file.Value()), "--direct=1", "--ioengine=psync",
		"--time_based", "--runtime=" + runtime, "--group_reporting",
		// PostgreSQL's data files: 8 KiB pages, 70% reads, an fsync every 8 writes.
		"--name=data-8k-randrw", "--rw=randrw", "--rwmixread=70", "--bs=8k", "--fsync=8", "--numjobs=2",
		// Its WAL: sequential writes, flushed.
		"--name=wal-1m-write", "--stonewall", "--rw=write", "--bs=1m", "--fdatasync=1", "--numjobs=1"}
	job := toolJob(ns, o.name, "daytwo-fio", corev1.PodSpec{
		SecurityContext: fioPodSecurity(),
		Containers: []corev1.Container{{
			Name: "fio", Image: o.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: append([]string{"fio"}, args...),
			SecurityContext: restrictedContainer(),
			VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.name}}}},
	})
	return job, pvc
}
