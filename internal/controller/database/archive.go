package database

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/series"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Continuous archiving: a Physical DatabaseBackup of a Database makes its
// instances archive WAL into the backup's storage (see
// internal/instance/archive.go). The operator renders instanceapi.Archive
// into the ConfigMap, projects the S3 keys into the secrets volume (or
// mounts the backup volume), and marks the pod template with the archive's
// location: archive_mode takes a restart, which the rollout does one
// instance at a time, with a switchover before the primary's.

// archiveMount is where a volume archive is mounted in instance pods.
const archiveMount = "/archive"

// annArchive on the pod template is where WAL is archived; absent without
// archiving.
const annArchive = "daytwo.dev/archive"

// archivePlan is where a Database archives its WAL.
type archivePlan struct {
	// backup is the Physical DatabaseBackup's name, location its storage.
	backup, location string
	storagePlan
}

// storagePlan is one storage the instance manager reaches by itself: the
// JSON it reads, and what the pods get to reach it.
type storagePlan struct {
	conf instanceapi.Archive
	// s3Secret, idKey and secretKey: the S3 credentials to project; ca, a
	// private CA's Secret key (S3Storage.caSecretRef), or nil.
	s3Secret, idKey, secretKey string
	ca                         *v1alpha1.SecretKeyRef
	// token is the web identity's ServiceAccount token to project, or nil.
	token *corev1.ServiceAccountTokenProjection
	// keySecret and keyKey: the series key the WAL is sealed with; enc,
	// the key it is encrypted with, or nil.
	keySecret, keyKey string
	enc               *v1alpha1.SecretKeyRef
	// claim is the volume archive's PersistentVolumeClaim.
	claim string
}

// storagePlanOf is what reaching b's storage takes, its files named as
// files says.
func storagePlanOf(b *v1alpha1.DatabaseBackup, files instanceapi.StorageFiles) storagePlan {
	a := storagePlan{conf: instanceapi.Archive{Prefix: series.Prefix(b)}}
	a.keySecret, a.keyKey = series.KeySecret(b)
	if e := b.Spec.Encryption; e != nil {
		a.enc = &e.KeySecretRef
	}
	if s3 := b.Spec.Storage.S3; s3 != nil {
		a.conf.S3 = &instanceapi.ArchiveS3{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: s3.Region, Insecure: s3.Insecure,
			S3Access: series.S3Access(s3, "")}
		if ref := s3.CredentialsSecretRef; ref != nil {
			a.s3Secret, a.idKey, a.secretKey = ref.Name, cmp.Or(ref.AccessKeyIDKey, "AWS_ACCESS_KEY_ID"), cmp.Or(ref.SecretAccessKeyKey, "AWS_SECRET_ACCESS_KEY")
		}
		if wi := s3.WebIdentity; wi != nil {
			a.token = series.TokenProjection(wi, files.Token)
		}
		a.ca = s3.CASecretRef
	} else {
		a.claim = b.Spec.Storage.PVC.ClaimName
		a.conf.Directory = strings.TrimSuffix(archiveMount+"/"+b.Spec.Storage.PVC.Path, "/")
	}
	return a
}

// physicalBackupsOf lists the Physical DatabaseBackups of db, the one that
// archives first (series.PhysicalOf).
func (r *Reconciler) physicalBackupsOf(ctx context.Context, db *v1alpha1.Database) ([]v1alpha1.DatabaseBackup, error) {
	list := &v1alpha1.DatabaseBackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(db.Namespace)); err != nil {
		return nil, fmt.Errorf("failed to list DatabaseBackups: %w", err)
	}
	return series.PhysicalOf(list.Items, db.Name), nil
}

// resolveArchive finds where db archives its WAL: the oldest of its
// Physical DatabaseBackups (a second one is named in the status, and
// archives nothing until the first goes).
func (r *Reconciler) resolveArchive(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	backups, err := r.physicalBackupsOf(ctx, db)
	if err != nil || len(backups) == 0 {
		return err
	}
	b := &backups[0]
	if problem := series.AudienceProblem(b, r.APIAudiences); problem != "" {
		obs.found.archiveNote = "WAL is not archived to DatabaseBackup " + b.Name + ": " + problem
		return nil
	}
	obs.plan.archive = &archivePlan{backup: b.Name, location: series.Location(b), storagePlan: storagePlanOf(b, instanceapi.ArchiveFiles)}
	if len(backups) > 1 {
		var others []string
		for _, o := range backups[1:] {
			others = append(others, o.Name)
		}
		obs.found.archiveNote = fmt.Sprintf("WAL is archived to DatabaseBackup %s only; %s also asks for it (a Database archives to one Physical DatabaseBackup)",
			b.Name, strings.Join(others, ", "))
	}
	return nil
}

// archiveConf is the archive.json content, "" without archiving.
func (p plan) archiveConf() string {
	if p.archive == nil {
		return ""
	}
	b, _ := json.Marshal(p.archive.conf) //nolint:errchkjson // strings and bools always marshal
	return string(b)
}

// archiveSecrets projects the archive's credentials and keys under the
// names the instance manager reads; sourceSecrets a replica's source's.
func archiveSecrets(p plan) []*corev1ac.VolumeProjectionApplyConfiguration {
	if p.archive == nil {
		return nil
	}
	return p.archive.projections(instanceapi.ArchiveFiles)
}

// projections are a's credentials and keys, projected as files names them.
func (a storagePlan) projections(files instanceapi.StorageFiles) []*corev1ac.VolumeProjectionApplyConfiguration {
	// The series key, S3 or volume: the pod starts once its Secret exists
	// (the DatabaseBackup makes its own at once).
	out := []*corev1ac.VolumeProjectionApplyConfiguration{secretFile(a.keySecret, a.keyKey, files.SeriesKey)}
	if a.enc != nil {
		out = append(out, secretFile(a.enc.Name, cmp.Or(a.enc.Key, "key"), files.EncryptionKey))
	}
	if a.s3Secret != "" {
		out = append(out, corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(a.s3Secret).
			WithItems(corev1ac.KeyToPath().WithKey(a.idKey).WithPath(files.AccessKeyID),
				corev1ac.KeyToPath().WithKey(a.secretKey).WithPath(files.SecretAccessKey))))
	}
	if a.token != nil {
		out = append(out, corev1ac.VolumeProjection().WithServiceAccountToken(corev1ac.ServiceAccountTokenProjection().
			WithAudience(a.token.Audience).WithExpirationSeconds(*a.token.ExpirationSeconds).WithPath(a.token.Path)))
	}
	if a.ca != nil {
		out = append(out, secretFile(a.ca.Name, cmp.Or(a.ca.Key, "ca.crt"), files.CA))
	}
	return out
}

// secretFile projects key of Secret name as the file path.
func secretFile(name, key, path string) *corev1ac.VolumeProjectionApplyConfiguration {
	return corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(name).
		WithItems(corev1ac.KeyToPath().WithKey(key).WithPath(path)))
}

// archiveVolumes and archiveMounts give a volume archive to the instances.
func archiveVolumes(p plan) []*corev1ac.VolumeApplyConfiguration {
	if p.archive == nil || p.archive.claim == "" {
		return nil
	}
	return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName("archive").
		WithPersistentVolumeClaim(corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(p.archive.claim))}
}

func archiveMounts(p plan) []*corev1ac.VolumeMountApplyConfiguration {
	if p.archive == nil || p.archive.claim == "" {
		return nil
	}
	return []*corev1ac.VolumeMountApplyConfiguration{corev1ac.VolumeMount().WithName("archive").WithMountPath(archiveMount)}
}

// physicalBackupRequests maps a Physical DatabaseBackup to its Database.
func physicalBackupRequests(obj client.Object) []reconcile.Request {
	b, ok := obj.(*v1alpha1.DatabaseBackup)
	if !ok || b.Spec.Method != v1alpha1.BackupMethodPhysical {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.DatabaseRef.Name}}}
}

// setArchiveCondition says whether the primary archives the WAL, from what
// its instance manager reports.
func setArchiveCondition(db *v1alpha1.Database, obs *observation, set func(string, bool, string, string)) {
	a := obs.plan.archive
	if a == nil {
		meta.RemoveStatusCondition(&db.Status.Conditions, v1alpha1.ConditionContinuousArchiving)
		db.Status.WALArchive = nil
		return
	}
	setWALArchive(&db.Status, a.backup, obs.Instances[obs.Primary].Archive)
	note := ""
	if obs.found.archiveNote != "" {
		note = "; " + obs.found.archiveNote
	}
	s, ok := obs.Instances[obs.Primary]
	switch {
	case !ok || s.Archive == nil || s.Archive.LastArchived == "" && (s.Phase != instanceapi.PhaseRunning || slices.Contains(s.PendingRestartSettings, "archive_mode")):
		// Archiving starts with a restart of the primary: until it runs
		// in archive mode (and has archived once since its manager
		// started), a base backup would find it stopping or gone
		// (pg_basebackup: connection refused) and lack its WAL.
		set(v1alpha1.ConditionContinuousArchiving, false, v1alpha1.ReasonArchivingStarting,
			"WAL archiving to DatabaseBackup "+a.backup+" starts once the primary restarts with it"+note)
	case s.Archive.LastError != "": // cleared by the next success
		set(v1alpha1.ConditionContinuousArchiving, false, v1alpha1.ReasonArchivingFailed, archiveFailure(obs.Primary, a.backup, s.Archive)+note)
	default:
		last := "nothing yet: a segment is archived once it is full, or a minute after a write"
		if s.Archive.LastArchived != "" && s.Archive.LastArchivedTime != nil {
			last = s.Archive.LastArchived + " at " + s.Archive.LastArchivedTime.UTC().Format(time.RFC3339)
		}
		set(v1alpha1.ConditionContinuousArchiving, true, v1alpha1.ReasonArchiving,
			"The primary "+obs.Primary+" archives WAL to DatabaseBackup "+a.backup+"; last archived "+last+note)
	}
}

// setWALArchive records what the primary last archived to backup. A
// manager that starts again knows of nothing archived yet, and a new
// primary of nothing its predecessor archived: the record never moves back.
func setWALArchive(st *v1alpha1.DatabaseStatus, backup string, a *instanceapi.ArchiveStatus) {
	if st.WALArchive == nil || st.WALArchive.Backup != backup {
		st.WALArchive = &v1alpha1.WALArchiveStatus{Backup: backup}
	}
	w := st.WALArchive
	if a == nil || a.LastArchived == "" || a.LastArchivedTime == nil {
		return
	}
	at := a.LastArchivedTime.UTC().Truncate(time.Second) // what the status keeps
	if w.LastArchivedTime != nil && !at.After(w.LastArchivedTime.Time) {
		return
	}
	w.LastArchivedWAL, w.LastArchivedTime = a.LastArchived, &metav1.Time{Time: at}
}

// recoveryProgress is the primary's point-in-time recovery progress, while
// it bootstraps.
func recoveryProgress(obs *observation) *v1alpha1.RecoveryProgress {
	s, ok := obs.Instances[obs.Primary]
	if !ok || s.Recovery == nil {
		return nil
	}
	r := s.Recovery
	out := &v1alpha1.RecoveryProgress{BaseBackup: r.BaseBackup, TargetLSN: r.TargetLSN, ReplayedLSN: r.ReplayedLSN,
		EndLSN: r.EndLSN, BytesPerSecond: r.BytesPerSecond, RemainingSeconds: r.RemainingSeconds, Restored: int32(r.Restored)}
	if r.TargetTime != nil {
		out.TargetTime = &metav1.Time{Time: *r.TargetTime}
	}
	return out
}

// archiveFailure says what fails, and how long the data volume lasts.
func archiveFailure(primary, backup string, s *instanceapi.ArchiveStatus) string {
	msg := fmt.Sprintf("The primary %s fails to archive WAL to DatabaseBackup %s (%d failures): %s; %d files (%d MiB) wait in pg_wal",
		primary, backup, s.Failed, s.LastError, s.Pending, s.PendingBytes>>20)
	if s.TimeToFullSeconds > 0 {
		msg += fmt.Sprintf(", and at the rate they grow the data volume (%d MiB free) fills in about %s",
			s.VolumeFreeBytes>>20, (time.Duration(s.TimeToFullSeconds) * time.Second).Round(time.Minute).String())
	}
	return msg
}

// archiveEvent warns once when the primary starts failing to archive: the
// condition written before this reconcile did not say so yet.
func (r *Reconciler) archiveEvent(ctx context.Context, db, written *v1alpha1.Database, obs *observation) {
	s, ok := obs.Instances[obs.Primary]
	if obs.plan.archive == nil || !ok || s.Archive == nil || s.Archive.LastError == "" {
		return
	}
	if c := meta.FindStatusCondition(written.Status.Conditions, v1alpha1.ConditionContinuousArchiving); c != nil && c.Reason == v1alpha1.ReasonArchivingFailed {
		return
	}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeWarning, v1alpha1.ReasonArchivingFailed, "Archive",
		"%s", archiveFailure(obs.Primary, obs.plan.archive.backup, s.Archive))
}

// recordArchiveMetrics publishes the primary's archive backlog and its last
// success; without archiving, the series go.
func recordArchiveMetrics(db *v1alpha1.Database, obs *observation) {
	s, ok := obs.Instances[obs.Primary]
	if obs.plan.archive == nil {
		walPending.DeleteLabelValues(db.Namespace, db.Name)
		walLastArchived.DeleteLabelValues(db.Namespace, db.Name)
		return
	}
	if !ok || s.Archive == nil {
		return
	}
	walPending.WithLabelValues(db.Namespace, db.Name).Set(float64(s.Archive.Pending))
	if s.Archive.LastArchivedTime != nil {
		walLastArchived.WithLabelValues(db.Namespace, db.Name).Set(float64(s.Archive.LastArchivedTime.Unix()))
	}
}

// resolveRestore finds the storage a Database bootstrapped from a backup
// restores from. Until the DatabaseBackup exists nothing is created; once
// the instances run, a vanished DatabaseBackup leaves the StatefulSet as it
// is rather than restarting the instances to drop the restore settings.
func (r *Reconciler) resolveRestore(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	b := db.Spec.Bootstrap
	if b == nil || b.FromBackup == nil {
		return nil
	}
	src := &v1alpha1.DatabaseBackup{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: b.FromBackup.BackupRef.Name}, src)
	if apierrors.IsNotFound(err) {
		if obs.sts != nil {
			obs.found.keepStatefulSet = true
			return nil
		}
		obs.found.restoreFailed = fmt.Sprintf("spec.bootstrap.fromBackup.backupRef: DatabaseBackup %s does not exist", b.FromBackup.BackupRef.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get DatabaseBackup %s: %w", b.FromBackup.BackupRef.Name, err)
	}
	if problem := series.AudienceProblem(src, r.APIAudiences); problem != "" {
		if obs.sts != nil {
			// The instances run: they stay as they are, as when the
			// source is gone; nothing else stops.
			obs.found.keepStatefulSet = true
			return nil
		}
		obs.found.restoreFailed = "spec.bootstrap.fromBackup: " + problem
		return nil
	}
	storage, env, vols, mounts := series.Storage(src, instanceapi.RestorePrefix)
	flags := instanceapi.RunFlags{Restore: storage}
	f := b.FromBackup
	if src.Spec.Method == v1alpha1.BackupMethodPhysical {
		flags.RestorePhysical = true
		if f.TargetTime != nil {
			flags.RecoveryTarget.Time = f.TargetTime.UTC().Format(time.RFC3339Nano)
		}
		flags.RecoveryTarget.LSN = f.TargetLSN
	} else if f.TargetTime != nil || f.TargetLSN != "" {
		obs.found.restoreFailed = fmt.Sprintf("spec.bootstrap.fromBackup: a recovery target needs a Physical DatabaseBackup; %s takes %s backups, "+
			"which restore whole", src.Name, cmp.Or(src.Spec.Method, v1alpha1.BackupMethodLogical))
		return nil
	}
	obs.found.in.restore = &restoreSource{flags: flags, env: env, volumes: vols, mounts: mounts}
	return nil
}
