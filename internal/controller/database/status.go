package database

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/controller/conditions"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// findings are what the phases decided and found, in the order they run:
// the phases after read them, and setStatus reports them.
type findings struct {
	// invalid says what is wrong with the spec (validate).
	invalid string
	// in is the StatefulSet's inputs decideImage chose (images, major,
	// a restore's source), and templateImage the image the live template runs.
	in            stsInputs
	templateImage string
	// rolledBack says an image that never became ready was rolled back.
	rolledBack string
	// conflict names a child another owner holds: the reconcile stops.
	conflict string
	// tls is the served certificate (see reconcileTLS).
	tls tlsState
	// archiveNote says a second Physical DatabaseBackup archives nothing.
	archiveNote string
	// restoreFailed says why a restore's source cannot be found;
	// keepStatefulSet, that a restore's source went away once the
	// instances were made, which then stay as they are.
	restoreFailed string
	// fenceFailed names the instances whose fence could not be set, and why.
	fenceFailed     []string
	keepStatefulSet bool
	// rolloutWaiting says why a rollout holds (Progressing=True).
	rolloutWaiting string
	// hibernating says what spec.hibernation On is doing ("" when Off).
	hibernating string
	// staleJob: the upgrade Job is another attempt's; upgradeTo is the
	// major the running attempt (or its Job) upgrades to; upgradeAction
	// what this reconcile does about a version change, upgradeFailed why
	// a version is held back.
	staleJob      bool
	upgradeTo     string
	upgradeAction upgradeAction
	upgradeFailed string
	// outdated counts the instances on an old revision; pendingParams
	// the settings that wait for their restart.
	outdated      int
	pendingParams []string

	storageReason, storageMessage string
	// storageFinal: the volumes differ from spec for good (a shrink), so
	// nothing is pending.
	storageFinal bool

	// roles is where each of spec.roles stands (nil: not asked this
	// reconcile, the last status stands); servedCA the served
	// certificate's CA, read once for the roles' Secrets.
	roles    []v1alpha1.RoleStatus
	servedCA []byte
	// databases is where each of spec.databases stands (nil: not asked
	// this reconcile).
	databases []v1alpha1.LogicalDatabaseStatus
	// pooler and poolerCondition are where spec.pooler's pools stand
	// (nil: not looked at this reconcile, the last status stands).
	pooler          *v1alpha1.PoolerStatus
	poolerCondition *metav1.Condition
}

// setStatus rebuilds db's status from obs.
func setStatus(db *v1alpha1.Database, obs *observation) {
	st := &db.Status
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		conditions.Set(&st.Conditions, db.Generation, typ, s, reason, msg)
	}
	st.Instances = obs.plan.instances
	st.Selector = metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: selectorLabels(db)})
	st.Endpoint = endpoint(db)
	st.SecretName = db.CredentialsSecretName()
	st.Database, _ = db.AppDatabase()
	st.Parameters = obs.plan.statusParameters()
	st.ObservedGeneration = db.Generation
	if obs.found.invalid != "" {
		st.Phase, st.Ready = v1alpha1.DatabasePhaseDegraded, false
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonInvalidSpec, obs.found.invalid)
		return
	}
	if obs.found.conflict != "" {
		st.Phase, st.Ready = v1alpha1.DatabasePhaseDegraded, false
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonConflictingResource, obs.found.conflict)
		return
	}
	setCertificateCondition(obs, set)
	if obs.found.tls.problem != "" && obs.sts == nil {
		st.Phase, st.Ready = v1alpha1.DatabasePhaseCreating, false
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonCertificateInvalid, obs.found.tls.problem)
		return
	}
	if obs.found.restoreFailed != "" {
		st.Phase, st.Ready = v1alpha1.DatabasePhaseCreating, false
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonRestoreFailed, obs.found.restoreFailed)
		return
	}
	st.CurrentVersion = obs.found.in.major
	st.CurrentImage = obs.found.in.goodImage
	if st.CurrentImage == "" {
		st.CurrentImage = obs.found.in.image
	}
	st.FailedImage = obs.found.in.failedImage
	st.InstanceStatuses = obs.InstanceStatuses
	st.Recovery = recoveryProgress(obs)
	st.ReadyInstances, st.Primary = 0, ""
	primaryReady, primaryWhy := false, "the primary pod does not exist yet"
	for i := range obs.Pods {
		pod := &obs.Pods[i]
		// A fenced pod is ready in the kubelet's sense only (see
		// roleFenced): it serves nothing.
		ready := podReady(pod) && pod.DeletionTimestamp.IsZero() && !fencedPod(db, obs, pod) && !labelledFenced(pod)
		if ready {
			st.ReadyInstances++
		}
		if pod.Name == obs.Primary {
			st.Primary, primaryReady, primaryWhy = pod.Name, ready, notReadyReason(pod)
		}
	}
	st.Ready = primaryReady
	// The lease names an instance still running as a replica: it is being
	// promoted.
	st.TargetPrimary = ""
	if obs.HolderIsReplica(obs.Primary) {
		st.TargetPrimary = obs.Primary
	}
	st.Replica = replicaStatus(db, obs)
	switch reason, msg := primaryError(obs.Pods, obs.Primary); {
	case following(db):
		st.Ready = st.ReadyInstances > 0
		set(v1alpha1.ConditionReady, st.Ready, v1alpha1.ReasonFollowingSource, followingMessage(st))
	case obs.found.hibernating != "":
		reason := v1alpha1.ReasonHibernating
		if obs.found.in.stopped && len(obs.Pods) == 0 {
			reason = v1alpha1.ReasonHibernated
		}
		set(v1alpha1.ConditionReady, false, reason, obs.found.hibernating)
	case supersededBy(obs) != "":
		st.Ready = false
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonSuperseded, supersededBy(obs)+" was promoted from this Database's WAL archive, "+
			"or from the source it follows: no instance of this Database serves as primary again. Delete it; to follow the new primary, "+
			"create a replica Database of it")
	case obs.Primary == instanceapi.ExternalHolder:
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonPromoting, promotingMessage(db, obs))
	case obs.FailoverWaiting != "":
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonFailingOver, obs.FailoverWaiting)
	case obs.ServingOnPromises != "":
		set(v1alpha1.ConditionReady, true, v1alpha1.ReasonServingOnPromises, obs.ServingOnPromises)
	case primaryReady:
		set(v1alpha1.ConditionReady, true, v1alpha1.ReasonAvailable,
			fmt.Sprintf("The primary %s accepts connections; %d of %d instances ready", st.Primary, st.ReadyInstances, st.Instances))
	case reason != "":
		set(v1alpha1.ConditionReady, false, reason, msg)
	default:
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonPrimaryNotReady, "The primary is not ready: "+primaryWhy)
	}
	setRolloutConditions(db, obs, set)
	st.Phase = phase(db, obs, primaryReady)
}

func setRolloutConditions(db *v1alpha1.Database, obs *observation, set func(string, bool, string, string)) {
	setArchiveCondition(db, obs, set)
	setFencedCondition(db, obs, set)
	st := &db.Status
	switch {
	case obs.found.upgradeFailed != "":
		set(v1alpha1.ConditionUpgradeFailed, true, v1alpha1.ReasonMajorUpgradeFailed, obs.found.upgradeFailed)
	case obs.found.rolledBack != "":
		set(v1alpha1.ConditionUpgradeFailed, true, v1alpha1.ReasonRolledBack, obs.found.rolledBack)
	default:
		set(v1alpha1.ConditionUpgradeFailed, false, v1alpha1.ReasonUpToDate, "No version change has failed")
	}
	reported := uniqueSorted(reportedPending(obs))
	switch {
	case len(obs.found.pendingParams) > 0:
		set(v1alpha1.ConditionPendingRestart, true, v1alpha1.ReasonRestartRequired,
			fmt.Sprintf("Changed settings need a restart: %s; restarting replicas first, then the primary after a switchover "+
				"(a lowered setting a replica may not run below its primary: the primary first, in place)",
				strings.Join(obs.found.pendingParams, ", ")))
	case len(reported) > 0:
		set(v1alpha1.ConditionPendingRestart, true, v1alpha1.ReasonRestartRequired,
			fmt.Sprintf("PostgreSQL reports settings waiting for a restart that spec did not change (ALTER SYSTEM?): %s; "+
				"deleting the pods applies them", strings.Join(reported, ", ")))
	default:
		set(v1alpha1.ConditionPendingRestart, false, v1alpha1.ReasonUpToDate, "Every instance runs the current settings")
	}
	switch {
	case obs.SwitchoverWaiting != "":
		set(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonSwitchoverPending, "A switchover waits: "+obs.SwitchoverWaiting)
	case obs.found.rolloutWaiting != "":
		set(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonRollingOut, obs.found.rolloutWaiting)
	case obs.found.outdated > 0:
		set(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonRollingOut,
			fmt.Sprintf("%d of %d instances run an older revision", obs.found.outdated, st.Instances))
	case st.ReadyInstances < st.Instances:
		set(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonReconciling,
			fmt.Sprintf("%d of %d instances ready", st.ReadyInstances, st.Instances))
	case obs.found.rolledBack != "":
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolledBack, obs.found.rolledBack)
	default:
		set(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonRolloutComplete, "Every instance runs "+st.CurrentImage)
	}
	if obs.found.storageReason != "" {
		set(v1alpha1.ConditionStorageResizePending, !obs.found.storageFinal, obs.found.storageReason, obs.found.storageMessage)
	} else {
		set(v1alpha1.ConditionStorageResizePending, false, v1alpha1.ReasonUpToDate, "Volumes match spec")
	}
	st.Roles = reportDeclared(st.Roles, obs.found.roles, db.Spec.Roles, declaredReport[v1alpha1.RoleStatus, v1alpha1.DatabaseRole]{
		what: "roles", condition: v1alpha1.ConditionRolesReconciled, applied: v1alpha1.ReasonRolesApplied,
		failed: v1alpha1.ReasonRoleFailed, pending: v1alpha1.ReasonRolesPending,
		specName: func(r v1alpha1.DatabaseRole) string { return r.Name },
		state:    func(r v1alpha1.RoleStatus) (string, v1alpha1.RoleState, string) { return r.Name, r.State, r.Message },
		pendingOf: func(name string) v1alpha1.RoleStatus {
			return v1alpha1.RoleStatus{Name: name, State: v1alpha1.RolePending}
		},
	}, &st.Conditions, set)
	st.Databases = reportDeclared(st.Databases, obs.found.databases, db.Spec.Databases,
		declaredReport[v1alpha1.LogicalDatabaseStatus, v1alpha1.LogicalDatabase]{
			what: "databases", condition: v1alpha1.ConditionDatabasesReconciled, applied: v1alpha1.ReasonDatabasesApplied,
			failed: v1alpha1.ReasonDatabaseFailed, pending: v1alpha1.ReasonDatabasesPending,
			specName: func(d v1alpha1.LogicalDatabase) string { return d.Name },
			state: func(d v1alpha1.LogicalDatabaseStatus) (string, v1alpha1.RoleState, string) {
				return d.Name, d.State, d.Message
			},
			pendingOf: func(name string) v1alpha1.LogicalDatabaseStatus {
				return v1alpha1.LogicalDatabaseStatus{Name: name, State: v1alpha1.RolePending}
			},
		}, &st.Conditions, set)
	switch {
	case db.Spec.Pooler == nil:
		st.Pooler = nil
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionPoolerReady)
	case obs.found.poolerCondition != nil:
		st.Pooler = obs.found.pooler
		c := obs.found.poolerCondition
		set(c.Type, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	}
}

func phase(db *v1alpha1.Database, obs *observation, primaryReady bool) v1alpha1.DatabasePhase {
	st := &db.Status
	rollingImage := obs.found.in.goodImage != "" && obs.found.templateImage != "" && obs.found.templateImage != obs.found.in.goodImage
	switch {
	case following(db) && supersededBy(obs) == "":
		return v1alpha1.DatabasePhaseReplica
	case supersededBy(obs) != "":
		return v1alpha1.DatabasePhaseDegraded
	case obs.found.hibernating != "":
		return v1alpha1.DatabasePhaseHibernated
	case obs.found.in.stopped:
		return v1alpha1.DatabasePhaseUpgrading
	case obs.found.in.goodImage == "" && !primaryReady:
		return v1alpha1.DatabasePhaseCreating
	case obs.found.outdated > 0 || rollingImage:
		return v1alpha1.DatabasePhaseUpgrading
	case !primaryReady || st.ReadyInstances < st.Instances || obs.found.rolledBack != "" || obs.found.upgradeFailed != "":
		return v1alpha1.DatabasePhaseDegraded
	default:
		return v1alpha1.DatabasePhaseReady
	}
}

// notReadyReason explains a pod that is not ready in a few stable words.
func notReadyReason(pod *corev1.Pod) string {
	if !pod.DeletionTimestamp.IsZero() {
		return "pod " + pod.Name + " is terminating"
	}
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			return fmt.Sprintf("container %s of pod %s is %s", cs.Name, pod.Name, w.Reason)
		}
	}
	if pod.Status.Phase == corev1.PodPending {
		return "pod " + pod.Name + " is pending"
	}
	return "pod " + pod.Name + " is starting"
}

func uniqueSorted(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// primaryError is the condition reason and message for what the primary's
// instance manager said when it stopped (it writes its fatal error as the
// termination message): a failed restore, or data it refused to serve.
func primaryError(pods []corev1.Pod, primary string) (string, string) {
	reasons := map[string]string{
		instanceapi.TerminationRestoreFailed: v1alpha1.ReasonRestoreFailed,
		instanceapi.TerminationImportFailed:  v1alpha1.ReasonImportFailed,
		instanceapi.TerminationUpgradeFailed: v1alpha1.ReasonMajorUpgradeFailed,
		instanceapi.TerminationDataConflict:  v1alpha1.ReasonDataConflict,
	}
	for i := range pods {
		if pods[i].Name != primary {
			continue
		}
		for _, cs := range append(slices.Clone(pods[i].Status.InitContainerStatuses), pods[i].Status.ContainerStatuses...) {
			if cs.Name != containerPostgres && cs.Name != containerRestore {
				continue
			}
			if t := cs.State.Terminated; cs.Name == containerRestore && t != nil && t.ExitCode == 0 {
				continue // restored: an earlier failed attempt is history
			}
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t == nil || t.ExitCode == 0 {
					continue
				}
				for prefix, reason := range reasons {
					if strings.HasPrefix(t.Message, prefix) {
						return reason, controller.Truncate(t.Message, 1024)
					}
				}
			}
		}
	}
	return "", ""
}

// setCertificateCondition says which certificate the instances serve and
// until when, or why the one spec.tls names cannot be served.
func setCertificateCondition(obs *observation, set func(string, bool, string, string)) {
	switch {
	case obs.found.tls.problem != "":
		set(v1alpha1.ConditionServerCertificate, false, v1alpha1.ReasonCertificateInvalid, obs.found.tls.problem)
	case obs.found.tls.secret != "":
		set(v1alpha1.ConditionServerCertificate, true, v1alpha1.ReasonCertificateValid,
			fmt.Sprintf("Serving the certificate in Secret %s, valid until %s", obs.found.tls.secret, obs.found.tls.notAfter.UTC().Format(time.RFC3339)))
	}
}
